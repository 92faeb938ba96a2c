//! [`Context`] (a CUDA context, current on the thread that created it) and
//! the calls made inside one: memory info, allocation, synchronisation; and
//! [`DeviceBuffer`], an allocation freed when dropped.

use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;

use crate::driver::Driver;
use crate::error::{CudaError, INVALID_VALUE};
use crate::ffi::{CUcontext, CUdeviceptr};

/// A CUDA context from [`Driver::create_context`], current on the thread
/// that created it; dropping it destroys it (`cuCtxDestroy_v2`), ignoring
/// errors; [`Context::destroy`] reports them.
///
/// Not `Send` or `Sync`: the context-dependent calls use the calling
/// thread's current context, which is this one on its creating thread
/// (unless another context was created there after it).
///
/// ```compile_fail
/// fn send<T: Send>() {}
/// send::<cuda_driver::Context<'static>>();
/// ```
///
/// ```compile_fail
/// fn sync<T: Sync>() {}
/// sync::<cuda_driver::Context<'static>>();
/// ```
pub struct Context<'d> {
    pub(crate) driver: &'d Driver,
    pub(crate) raw: CUcontext,
    pub(crate) _not_send: PhantomData<*const ()>,
}

/// `cuMemGetInfo_v2`: free and total memory of the context's device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryInfo {
    pub free_bytes: u64,
    pub total_bytes: u64,
}

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("raw", &self.raw).finish_non_exhaustive()
    }
}

impl Context<'_> {
    /// `cuMemGetInfo_v2`: free and total bytes of this context's device.
    pub fn memory_info(&self) -> Result<MemoryInfo, CudaError> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both out-pointers are live local `size_t`s.
        let code = unsafe { (self.driver.api().mem_get_info)(&mut free, &mut total) };
        self.driver.check("cuMemGetInfo_v2", code)?;
        Ok(MemoryInfo { free_bytes: free as u64, total_bytes: total as u64 })
    }

    /// `cuMemAlloc_v2`: `bytes` of device memory, freed when the buffer is
    /// dropped. A size that does not fit `size_t` is `CUDA_ERROR_INVALID_VALUE`.
    pub fn allocate(&self, bytes: u64) -> Result<DeviceBuffer<'_>, CudaError> {
        let size = usize::try_from(bytes)
            .map_err(|_| self.driver.error("cuMemAlloc_v2", INVALID_VALUE))?;
        let mut pointer: CUdeviceptr = 0;
        // SAFETY: the out-pointer is a live local `CUdeviceptr`; size by value.
        let code = unsafe { (self.driver.api().mem_alloc)(&mut pointer, size) };
        self.driver.check("cuMemAlloc_v2", code)?;
        Ok(DeviceBuffer { context: self, pointer, bytes })
    }

    /// `cuCtxSynchronize`: waits for all work in the current context.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: takes no arguments; acts on the calling thread's context.
        let code = unsafe { (self.driver.api().ctx_synchronize)() };
        self.driver.check("cuCtxSynchronize", code)
    }

    /// `cuCtxDestroy_v2`, reporting its error (dropping ignores it).
    pub fn destroy(self) -> Result<(), CudaError> {
        let this = ManuallyDrop::new(self);
        this.destroy_raw()
    }

    fn destroy_raw(&self) -> Result<(), CudaError> {
        // SAFETY: `raw` came from cuCtxCreate_v2 and is destroyed exactly
        // once: by `destroy` (which skips `Drop`) or by `Drop`. No buffer of
        // it is left: they borrow the context.
        let code = unsafe { (self.driver.api().ctx_destroy)(self.raw) };
        self.driver.check("cuCtxDestroy_v2", code)
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        // Nothing useful can be done with the error of a destroy on drop.
        let _ = self.destroy_raw();
    }
}

/// Device memory from [`Context::allocate`]; dropping it frees it
/// (`cuMemFree_v2`), ignoring errors; [`DeviceBuffer::free`] reports them.
pub struct DeviceBuffer<'c> {
    context: &'c Context<'c>,
    pointer: CUdeviceptr,
    bytes: u64,
}

impl fmt::Debug for DeviceBuffer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("pointer", &format_args!("{:#x}", self.pointer))
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl DeviceBuffer<'_> {
    /// The size asked for.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// `cuMemFree_v2`, reporting its error (dropping ignores it).
    pub fn free(self) -> Result<(), CudaError> {
        let this = ManuallyDrop::new(self);
        this.free_raw()
    }

    fn free_raw(&self) -> Result<(), CudaError> {
        let driver = self.context.driver;
        // SAFETY: `pointer` came from cuMemAlloc_v2 in a context that is
        // still alive (borrowed), and is freed exactly once: by `free`
        // (which skips `Drop`) or by `Drop`.
        let code = unsafe { (driver.api().mem_free)(self.pointer) };
        driver.check("cuMemFree_v2", code)
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // Nothing useful can be done with the error of a free on drop.
        let _ = self.free_raw();
    }
}
