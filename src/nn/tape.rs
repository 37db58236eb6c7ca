//! The recording of a forward pass: each dpgd layer called while a tape is open adds a zero
//! leaf ("probe") to its output and keeps what its per-example rule needs (its input, detached).
//! After ONE batched backward of the summed per-example losses, a probe's gradient is that
//! layer's per-example output gradient δ (the backward of `out + probe` hands `out`'s gradient
//! to the probe unchanged), from which the layer forms each example's parameter gradient.
//!
//! The tape is per thread and a stack of frames: a forward that runs inside another (a worker
//! thread stealing work while a burn kernel waits) opens and closes its own frame before the
//! outer one continues, so their records never mix. burn has no forward hooks, which is why the
//! layers record themselves (see the crate's `nn` module docs).

use std::cell::RefCell;

use burn::module::ParamId;
use burn::tensor::{Gradients, Tensor};

/// One layer call's record: the per-example gradients of its parameters, once the backward has
/// filled in its probe's gradient.
pub(crate) trait Recorded: Send {
    /// The parameters this call used.
    fn params(&self) -> Vec<ParamId>;
    /// Each parameter's per-example gradients, `[batch, numel]` in the parameter's row-major
    /// layout; empty if the call's output did not reach the loss (its gradient is zero).
    fn per_example(&mut self, grads: &mut Gradients) -> Vec<(ParamId, Tensor<2>)>;
    /// Values this call holds per example until its rule has run (recorded tensors, the
    /// probe's gradient, the rule's intermediates), for memory estimates.
    fn values_per_example(&self) -> usize;
}

/// Values per example of a batched tensor.
pub(crate) fn per_example(dims: &[usize]) -> usize {
    dims.iter().skip(1).product()
}

thread_local! {
    static FRAMES: RefCell<Vec<Vec<Box<dyn Recorded>>>> = const { RefCell::new(Vec::new()) };
}

/// The records of one recorded forward pass, in call order.
pub struct Tape {
    pub(crate) records: Vec<Box<dyn Recorded>>,
}

impl std::fmt::Debug for Tape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tape({} layer calls)", self.records.len())
    }
}

/// Runs `forward` with a tape open on this thread and returns its result with the records of
/// every dpgd layer it called.
pub fn record<T>(forward: impl FnOnce() -> T) -> (T, Tape) {
    /// Closes the frame even if `forward` panics, so a later recording starts clean.
    struct Frame;
    impl Drop for Frame {
        fn drop(&mut self) {
            FRAMES.with(|f| f.borrow_mut().pop());
        }
    }
    FRAMES.with(|f| f.borrow_mut().push(Vec::new()));
    let frame = Frame;
    let out = forward();
    let records = FRAMES.with(|f| f.borrow_mut().last_mut().map(std::mem::take).unwrap_or_default());
    drop(frame);
    (out, Tape { records })
}

/// Whether a tape is open on this thread (a private step's recorded forward).
pub(crate) fn is_open() -> bool {
    FRAMES.with(|f| !f.borrow().is_empty())
}

/// `out` with a probe added and `make(probe)` recorded, if a tape is open and `out` is on an
/// autodiff device; `out` unchanged otherwise (then the layer is exactly burn's).
pub(crate) fn attach<const D: usize, R: Recorded + 'static>(
    out: Tensor<D>,
    make: impl FnOnce(Tensor<D>) -> R,
) -> Tensor<D> {
    if !is_open() || !out.is_autodiff() {
        return out;
    }
    // `zeros_like` keeps the autodiff device and its checkpointing strategy; a fresh tensor is a
    // leaf, so `require_grad` is allowed and its gradient stays in `Gradients` until read. On
    // flex the probe is never added (a tap passes its gradient, see below): one zero broadcast
    // to the output's shape, no buffer of its size.
    let flex_tap = crate::device::is_flex(&out.device());
    let probe = if flex_tap { Tensor::<D>::zeros([1; D], &out.device()).expand(out.shape()) } else { out.zeros_like() };
    let probe = probe.require_grad();
    let record: Box<dyn Recorded> = Box::new(make(probe.clone()));
    FRAMES.with(|f| {
        if let Some(top) = f.borrow_mut().last_mut() {
            top.push(record);
        }
    });
    #[cfg(feature = "flex")]
    if let Some(tapped) = super::host::tap(&out, &probe) {
        return tapped;
    }
    out + probe
}
