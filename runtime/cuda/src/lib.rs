//! CUDA device memory as a sink (feature `cuda`): each tensor's bytes go through a
//! page-locked staging buffer to a device buffer of its own with asynchronous copies on
//! one stream; the device tensors are there when [`CudaSink::finish`] returns. The CUDA
//! driver is loaded when the sink is made, so a build with the feature runs (and says
//! why it cannot make a sink) on machines without one.
#![warn(missing_docs)]

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, PinnedHostSlice};

use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::sink::{Flow, Sink};
use tensorfmt_core::tensor::TensorInfo;

/// Bytes staged per copy.
const STAGE: usize = 4 << 20;

fn cuda_error(e: impl std::fmt::Display) -> Error {
    Error::from(ErrorKind::Sink(format!("CUDA: {e}")))
}

/// A tensor in device memory.
pub struct DeviceTensor {
    /// Its metadata (its location still names where it came from).
    pub info: TensorInfo,
    /// Its bytes on the device.
    pub data: CudaSlice<u8>,
}

/// Copies every tensor it is given to device memory (see the module documentation).
pub struct CudaSink {
    stream: Arc<CudaStream>,
    staging: [PinnedHostSlice<u8>; 2],
    next_stage: usize,
    current: Option<(TensorInfo, CudaSlice<u8>, usize)>,
    done: Vec<DeviceTensor>,
}

impl CudaSink {
    /// A sink on device `ordinal`; an error when there is no CUDA driver or device.
    pub fn new(ordinal: usize) -> Result<Self> {
        // SAFETY: only looks for the driver library (loading it if found).
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(cuda_error(
                "no CUDA driver library (libcuda) on this machine",
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(cuda_error)?;
        let stream = ctx.default_stream();
        // SAFETY: the staging buffers are written only through `as_mut_slice`, which
        // waits for the copies that read them.
        let staging = unsafe { [ctx.alloc_pinned::<u8>(STAGE), ctx.alloc_pinned::<u8>(STAGE)] };
        let [a, b] = staging;
        Ok(CudaSink {
            stream,
            staging: [a.map_err(cuda_error)?, b.map_err(cuda_error)?],
            next_stage: 0,
            current: None,
            done: Vec::new(),
        })
    }

    /// Waits for every copy and returns the device tensors, in the order they came.
    pub fn finish(self) -> Result<Vec<DeviceTensor>> {
        self.stream.synchronize().map_err(cuda_error)?;
        Ok(self.done)
    }
}

impl Sink for CudaSink {
    fn begin(&mut self, info: &TensorInfo) -> Result<Flow> {
        let len = usize::try_from(info.location.len())
            .map_err(|_| Error::from(ErrorKind::Overflow("tensor size".into())))?;
        // SAFETY: every byte is written by the copies `chunk` makes before `end` checks
        // the length.
        let buf = unsafe { self.stream.alloc::<u8>(len.max(1)) }.map_err(cuda_error)?;
        self.current = Some((info.clone(), buf, 0));
        Ok(Flow::Continue)
    }

    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        let Some((info, buf, filled)) = self.current.as_mut() else {
            return Err(cuda_error("bytes outside a tensor"));
        };
        if *filled + bytes.len() > info.location.len() as usize {
            return Err(cuda_error(format!(
                "more bytes than tensor '{}' holds",
                info.name
            )));
        }
        for piece in bytes.chunks(STAGE) {
            let mut dst = buf.slice_mut(*filled..*filled + piece.len());
            if piece.len() == STAGE {
                // Whole stages go through page-locked memory, two in flight.
                let stage = &mut self.staging[self.next_stage];
                self.next_stage ^= 1;
                stage
                    .as_mut_slice()
                    .map_err(cuda_error)?
                    .copy_from_slice(piece);
                self.stream
                    .memcpy_htod(stage, &mut dst)
                    .map_err(cuda_error)?;
            } else {
                self.stream
                    .memcpy_htod(piece, &mut dst)
                    .map_err(cuda_error)?;
            }
            *filled += piece.len();
        }
        Ok(())
    }

    fn end(&mut self, info: &TensorInfo) -> Result<Flow> {
        let Some((info0, data, filled)) = self.current.take() else {
            return Err(cuda_error("a tensor ended that did not begin"));
        };
        if filled as u64 != info.location.len() {
            return Err(cuda_error(format!(
                "tensor '{}': {filled} of {} bytes",
                info.name,
                info.location.len()
            )));
        }
        self.done.push(DeviceTensor { info: info0, data });
        Ok(Flow::Continue)
    }
}
