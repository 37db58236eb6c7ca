#!/bin/bash
# lavapipe: dpgd's kernels against burn's operations and the build before, one micro-batch of 64 phase by phase, and full steps of 512 examples.
export XDG_RUNTIME_DIR=/tmp
NEW=${NEW:-target/release/dpgd}
OLD=${OLD:?the build before (8c77bad)}
D=${MNIST_DIR:-../shared/datasets/mnist}
for variant in "now|$NEW|" "now-without-conv|$NEW|--without-kernels conv-weight-rows" "now-without-all|$NEW|--without-kernels clip-sum,block-square-sums,conv-weight-rows" "before|$OLD|"; do
  IFS='|' read -r label bin flags <<< "$variant"
  echo "{\"label\":\"phases-$label\",\"result\":$($bin bench-step --engine burn --device wgpu --chunk 64 --reps 5 --threads 1 --phases --data $D $flags 2>/dev/null | tail -1)}"
  echo "{\"label\":\"step-$label\",\"result\":$($bin bench-step --engine burn --device wgpu --chunk 64 --examples 512 --reps 3 --threads 2 --data $D $flags 2>/dev/null | tail -1)}"
done
