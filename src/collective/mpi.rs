//! The collective operations over MPI (rsmpi, the `mpi` feature): every rank a process started
//! by the system's launcher (`mpirun`, `srun`, …), the operations MPI's own reduce and broadcast
//! on `MPI_COMM_WORLD`. Only the thread that initialised MPI calls it (`MPI_THREAD_FUNNELED`):
//! the engines' worker threads never do.

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, Root};

use super::Collective;
use crate::error::{Error, Result};

/// This process's place in an MPI job: [`Mpi::init`] once per process, before training.
pub struct Mpi {
    // Finalizes MPI when dropped (after the run, on every rank).
    _universe: Universe,
    world: SimpleCommunicator,
    /// Set by [`Collective::abort`]: dropping this rank then ends the job.
    aborted: bool,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mpi {{ rank: {}, size: {} }}", self.rank(), self.size())
    }
}

impl Mpi {
    /// Initialises MPI for this process (a process started without a launcher is rank 0 of 1).
    ///
    /// # Errors
    /// MPI was initialised already, or the MPI library cannot give the thread level a process
    /// with worker threads needs.
    pub fn init() -> Result<Self> {
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            .ok_or_else(|| Error::Collective("MPI was initialised already in this process".into()))?;
        if threading < mpi::Threading::Funneled {
            return Err(Error::Collective(format!(
                "the MPI library gives thread level {threading:?}; dpgd's worker threads need at least Funneled"
            )));
        }
        let world = universe.world();
        Ok(Self { _universe: universe, world, aborted: false })
    }
}

impl Collective for Mpi {
    fn rank(&self) -> usize {
        usize::try_from(self.world.rank()).unwrap_or(0)
    }
    fn size(&self) -> usize {
        usize::try_from(self.world.size()).unwrap_or(1).max(1)
    }
    fn sum_to_root(&mut self, values: &mut [i64]) -> Result<()> {
        let root = self.world.process_at_rank(0);
        if self.rank() == 0 {
            let mut total = vec![0i64; values.len()];
            root.reduce_into_root(&*values, &mut total[..], SystemOperation::sum());
            values.copy_from_slice(&total);
        } else {
            root.reduce_into(&*values, SystemOperation::sum());
        }
        Ok(())
    }
    fn sum_to_root_f64(&mut self, values: &mut [f64]) -> Result<()> {
        let root = self.world.process_at_rank(0);
        if self.rank() == 0 {
            let mut total = vec![0f64; values.len()];
            root.reduce_into_root(&*values, &mut total[..], SystemOperation::sum());
            values.copy_from_slice(&total);
        } else {
            root.reduce_into(&*values, SystemOperation::sum());
        }
        Ok(())
    }
    /// The length first, then the bytes.
    fn broadcast(&mut self, bytes: &mut Vec<u8>) -> Result<()> {
        let root = self.world.process_at_rank(0);
        let mut len = bytes.len() as u64;
        root.broadcast_into(&mut len);
        if self.rank() != 0 {
            let len =
                usize::try_from(len).map_err(|_| Error::Collective(format!("rank 0 sent a message of {len} bytes")))?;
            bytes.clear();
            bytes.resize(len, 0);
        }
        // (An empty buffer's dangling pointer is not one MPI takes, even for no bytes.)
        if !bytes.is_empty() {
            root.broadcast_into(&mut bytes[..]);
        }
        Ok(())
    }
    /// Marks this rank failed: dropping it calls `MPI_Abort`, and the launcher ends every rank
    /// of the job (nothing on a job of one rank, which its error ends as any error ends a
    /// process). The library does not print: the caller shows the error, then drops this.
    fn abort(&mut self, _why: &str) {
        self.aborted = true;
    }
}

impl Drop for Mpi {
    fn drop(&mut self) {
        if self.aborted && self.size() > 1 {
            self.world.abort(1);
        }
    }
}
