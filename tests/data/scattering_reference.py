"""Reference values for tests/scattering.rs, computed by Kymatio (an independent implementation
of the 2-D scattering transform): `pip install kymatio==0.3.0 numpy scipy`, then
`python3 tests/data/scattering_reference.py > tests/data/scattering-kymatio.json`.

The images are deterministic formulas (no dataset), so the test needs no data file."""
import json

import numpy as np
# kymatio.numpy also imports the 3-D transform, which needs scipy.special.sph_harm (gone from
# SciPy 1.15+): import the 2-D NumPy frontend alone.
from kymatio.scattering2d.frontend.numpy_frontend import ScatteringNumPy2D as Scattering2D


def image(rows, cols, seed):
    r, c = np.mgrid[0:rows, 0:cols].astype(np.float64)
    # A smooth blob, an oriented edge and a pseudo-random texture: every band gets energy.
    blob = np.exp(-((r - rows * 0.4) ** 2 + (c - cols * 0.6) ** 2) / (0.05 * rows * cols))
    edge = (r * 0.8 + c * 0.3 > (rows + cols) * 0.4).astype(np.float64)
    texture = np.sin(r * 1.7 + seed) * np.cos(c * 2.3 - seed) * 0.3
    return blob + edge * 0.5 + texture


cases = []
for rows, cols, J, L, seed in [(28, 28, 2, 8, 0), (16, 12, 2, 4, 1), (24, 32, 3, 6, 2)]:
    x = image(rows, cols, seed)
    s = Scattering2D(J=J, shape=(rows, cols), L=L)(x)
    cases.append({"rows": rows, "cols": cols, "j": J, "angles": L,
                  "image": x.ravel().tolist(), "shape": list(s.shape), "coefficients": s.ravel().tolist()})
print(json.dumps({"kymatio": "0.3.0", "cases": cases}))
