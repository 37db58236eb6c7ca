//! The `dpgd` command line: a thin layer over the library.

mod cli;

/// mimalloc instead of the system allocator: a private step allocates and frees buffers of
/// megabytes per micro-batch (burn's tensors on the burn engine), which glibc's malloc hands back
/// to the kernel and faults in again. Measured on the Opacus CNN's burn-engine step (10,000
/// examples, four steps): page faults from ~1.5 million to ~38,000, the step from ~2.2 s to
/// ~1.7 s on 2 cores.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::run()
}
