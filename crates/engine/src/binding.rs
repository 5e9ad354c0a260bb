//! IoBinding: model inputs in pre-allocated host buffers, the output bound once per run.
//!
//! On the CUDA (and TensorRT) execution provider the host buffers are pinned (page-locked, ORT's
//! `CudaPinned` allocator), so ORT's host-to-device copy of `input_ids` and `attention_mask` is a
//! DMA transfer, and the `[batch, dim]` output is computed on the device and copied back into
//! pinned host memory once, at the end of the run. On the CPU provider the same code binds plain
//! CPU buffers (no copies to save there, but the path is then tested on every machine).
//!
//! The buffers are allocated once per session and reused for every batch; they grow (doubling)
//! only when a batch needs more than they hold. See ONNX Runtime's I/O binding documentation:
//! <https://onnxruntime.ai/docs/performance/tune-performance/iobinding.html>.

use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::{IoBinding, RunOptions, Session, SessionOutputs};
use ort::value::{Shape, Tensor, TensorRefMut};

use super::error::Result;

/// Where a session's inputs and outputs live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostMemory {
    /// Page-locked host memory of the CUDA device `device` (CUDA and TensorRT providers).
    Pinned { device: i32 },
    /// Ordinary CPU memory (CPU provider).
    Cpu,
}

/// An `IoBinding` with two reused `[capacity] i32` host buffers (ids, then mask).
pub struct Bound {
    memory: HostMemory,
    io: IoBinding,
    allocator: Allocator,
    host_info: MemoryInfo<'static>,
    output_info: MemoryInfo<'static>,
    output: String,
    /// `2 * capacity` i32: ids in the first half, the attention mask in the second.
    buffer: *mut i32,
    capacity: usize,
}

impl Bound {
    /// Creates the binding and its host buffers for `capacity` tokens per input (grown later if a
    /// batch needs more). Fails when the provider has no such allocator; the caller then falls
    /// back to plain runs.
    pub fn new(
        session: &Session,
        memory: HostMemory,
        output: &str,
        capacity: usize,
    ) -> Result<Self> {
        let (host_info, output_info) = match memory {
            HostMemory::Pinned { device } => (
                MemoryInfo::new(
                    AllocationDevice::CUDA_PINNED,
                    device,
                    AllocatorType::Device,
                    MemoryType::CPUInput,
                )?,
                MemoryInfo::new(
                    AllocationDevice::CUDA_PINNED,
                    device,
                    AllocatorType::Device,
                    MemoryType::CPUOutput,
                )?,
            ),
            HostMemory::Cpu => (
                MemoryInfo::new(
                    AllocationDevice::CPU,
                    0,
                    AllocatorType::Device,
                    MemoryType::Default,
                )?,
                MemoryInfo::new(
                    AllocationDevice::CPU,
                    0,
                    AllocatorType::Device,
                    MemoryType::Default,
                )?,
            ),
        };
        let allocator = Allocator::new(session, host_info.clone())?;
        let io = session.create_binding()?;
        let mut bound = Bound {
            memory,
            io,
            allocator,
            host_info,
            output_info,
            output: output.to_owned(),
            buffer: std::ptr::null_mut(),
            capacity: 0,
        };
        if memory != HostMemory::Cpu {
            bound.reserve(capacity.max(1))?;
        }
        Ok(bound)
    }

    fn reserve(&mut self, tokens: usize) -> Result<()> {
        if tokens <= self.capacity {
            return Ok(());
        }
        let capacity = tokens.next_power_of_two();
        let block = self.allocator.alloc::<i32>(2 * capacity)?;
        let fresh = block.into_raw().cast::<i32>();
        self.free();
        self.buffer = fresh;
        self.capacity = capacity;
        Ok(())
    }

    fn free(&mut self) {
        if !self.buffer.is_null() {
            // SAFETY: allocated by this allocator in `reserve` and not bound to any run in progress
            // (runs are synchronous and finish before the next call).
            unsafe { self.allocator.free(self.buffer) };
            self.buffer = std::ptr::null_mut();
            self.capacity = 0;
        }
    }

    /// `fill(ids, mask)` writes one `[rows, seq]` batch, row-major, into the host buffers; then the
    /// batch is bound and run (with `options` when given), and the outputs (on the host) are
    /// returned.
    pub fn run<'s>(
        &'s mut self,
        session: &'s mut Session,
        input_names: [&str; 2],
        rows: usize,
        seq: usize,
        fill: impl FnOnce(&mut [i32], &mut [i32]),
        options: Option<&RunOptions>,
    ) -> Result<SessionOutputs<'s>> {
        let n = rows * seq;
        let shape = Shape::new([rows as i64, seq as i64]);
        if self.memory == HostMemory::Cpu {
            // Owned tensors from the session's CPU allocator. A borrowed CPU tensor would make
            // ort (2.0.0-rc.15) clone it inside bind_input through an identity session that binds
            // again under the same lock, which deadlocks; pinned buffers (another device than the
            // session's inputs) are never cloned, so the GPU path below binds them directly.
            let mut ids_t = Tensor::<i32>::new(&self.allocator, shape.clone())?;
            let mut mask_t = Tensor::<i32>::new(&self.allocator, shape)?;
            fill(ids_t.extract_tensor_mut().1, mask_t.extract_tensor_mut().1);
            self.io.bind_input(input_names[0], &ids_t)?;
            self.io.bind_input(input_names[1], &mask_t)?;
            self.io
                .bind_output_to_device(self.output.as_str(), &self.output_info)?;
            return Ok(match options {
                Some(o) => session.run_binding_with_options(&self.io, o)?,
                None => session.run_binding(&self.io)?,
            });
        }
        self.reserve(n)?;
        // SAFETY: `buffer` holds 2 * capacity i32 and n <= capacity; the two halves do not overlap.
        let (ids, mask) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.buffer, n),
                std::slice::from_raw_parts_mut(self.buffer.add(self.capacity), n),
            )
        };
        fill(ids, mask);
        // SAFETY: the pointers are valid host memory described by host_info for n i32 each, and the
        // tensors are bound and run before the buffers can be reused or freed (&mut self).
        let ids_t = unsafe {
            TensorRefMut::<i32>::from_raw(
                self.host_info.clone(),
                ids.as_mut_ptr().cast(),
                shape.clone(),
            )?
        };
        let mask_t = unsafe {
            TensorRefMut::<i32>::from_raw(self.host_info.clone(), mask.as_mut_ptr().cast(), shape)?
        };
        self.io.bind_input(input_names[0], &ids_t)?;
        self.io.bind_input(input_names[1], &mask_t)?;
        self.io
            .bind_output_to_device(self.output.as_str(), &self.output_info)?;
        Ok(match options {
            Some(o) => session.run_binding_with_options(&self.io, o)?,
            None => session.run_binding(&self.io)?,
        })
    }
}

// SAFETY: `buffer` is owned by this binding (allocated and freed only through `allocator`, by
// whoever holds the `Bound`); nothing else keeps a pointer to it between runs. A session and its
// binding move between threads only as a whole (the backend's idle release drops them on another
// thread) and are never used from two threads at once.
unsafe impl Send for Bound {}

impl Drop for Bound {
    fn drop(&mut self) {
        self.io.clear();
        self.free();
    }
}
