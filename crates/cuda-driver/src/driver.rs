//! [`Driver`]: the loaded library and its resolved entry points, with the
//! calls that need no context (init, version, devices and their identity).
//! Every driver result goes through [`Driver::check`], which names errors.

use std::ffi::{CStr, OsStr};
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_int};

use libloading::Library;

use crate::context::Context;
use crate::error::{CudaError, LoadError};
use crate::ffi::{Api, CUDA_SUCCESS, CUcontext, CUdevice, CUresult, CUuuid};

/// The file name the dynamic loader resolves to the installed driver.
pub const DEFAULT_LIBRARY: &str = "libcuda.so.1";

/// Size of the name buffer handed to `cuDeviceGetName`.
const NAME_BUFFER: usize = 256;

/// A device handle (`CUdevice`) from [`Driver::device`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device(pub(crate) CUdevice);

/// The CUDA driver library, loaded, with every entry point this crate uses
/// resolved. The driver API is thread-safe, so a `Driver` may be shared;
/// contexts are per thread (see [`Context`]).
pub struct Driver {
    // `api` holds pointers into `library`: both live and die together.
    api: Api,
    library_name: String,
    _library: Library,
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("library", &self.library_name)
            .field("uuid_call", &self.api.device_get_uuid_name)
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// `dlopen`s `library` (a file name searched by the dynamic loader, or a
    /// path) and resolves every symbol this crate calls.
    pub fn load(library: &OsStr) -> Result<Driver, LoadError> {
        let library_name = library.to_string_lossy().into_owned();
        // SAFETY: loading runs the library's initialisers. The CUDA driver's
        // (and the fake's) are sound to run at any time in any thread; this
        // crate is documented to be pointed only at a CUDA driver library.
        let loaded = unsafe { Library::new(library) }.map_err(|error| LoadError::Library {
            library: library_name.clone(),
            reason: error.to_string(),
        })?;
        let api = Api::resolve(&loaded, &library_name)?;
        Ok(Driver { api, library_name, _library: loaded })
    }

    pub(crate) fn api(&self) -> &Api {
        &self.api
    }

    /// `cuInit(0)`. Every other call except [`Driver::driver_version`] fails
    /// with `CUDA_ERROR_NOT_INITIALIZED` until this succeeds.
    pub fn init(&self) -> Result<(), CudaError> {
        // SAFETY: cuInit takes flags by value (0 is the only valid value).
        let code = unsafe { (self.api.init)(0) };
        self.check("cuInit", code)
    }

    /// `cuDriverGetVersion`: the newest CUDA version the driver supports,
    /// `1000 × major + 10 × minor` (e.g. 12040 for 12.4).
    pub fn driver_version(&self) -> Result<i32, CudaError> {
        let mut version: c_int = 0;
        // SAFETY: the out-pointer is a live local `int`.
        let code = unsafe { (self.api.driver_get_version)(&mut version) };
        self.check("cuDriverGetVersion", code).map(|()| version)
    }

    /// `cuDeviceGetCount`: the number of devices this process can see.
    pub fn device_count(&self) -> Result<i32, CudaError> {
        let mut count: c_int = 0;
        // SAFETY: the out-pointer is a live local `int`.
        let code = unsafe { (self.api.device_get_count)(&mut count) };
        self.check("cuDeviceGetCount", code).map(|()| count)
    }

    /// `cuDeviceGet`: the device with this ordinal (`0..device_count()`).
    pub fn device(&self, ordinal: i32) -> Result<Device, CudaError> {
        let mut device: CUdevice = 0;
        // SAFETY: the out-pointer is a live local `CUdevice`.
        let code = unsafe { (self.api.device_get)(&mut device, ordinal) };
        self.check("cuDeviceGet", code).map(|()| Device(device))
    }

    /// The device's 16 UUID bytes (`cuDeviceGetUuid_v2` when the library has
    /// it, else `cuDeviceGetUuid`); see [`crate::format_uuid`].
    pub fn device_uuid(&self, device: Device) -> Result<[u8; 16], CudaError> {
        let mut uuid = CUuuid { bytes: [0; 16] };
        // SAFETY: the out-pointer is a live local `CUuuid` (16 bytes, as the
        // driver writes); `device` is passed by value.
        let code = unsafe { (self.api.device_get_uuid)(&mut uuid, device.0) };
        self.check(self.api.device_get_uuid_name, code)?;
        Ok(uuid.bytes.map(c_char_to_u8))
    }

    /// `cuDeviceGetName`, e.g. `"NVIDIA H100 80GB HBM3"`: the text up to
    /// the first NUL of a 256-byte buffer, invalid UTF-8 replaced.
    pub fn device_name(&self, device: Device) -> Result<String, CudaError> {
        let mut buffer: [c_char; NAME_BUFFER] = [0; NAME_BUFFER];
        // SAFETY: the buffer is live, writable and exactly the length passed.
        let code = unsafe {
            (self.api.device_get_name)(buffer.as_mut_ptr(), NAME_BUFFER as c_int, device.0)
        };
        self.check("cuDeviceGetName", code)?;
        let bytes = buffer.map(c_char_to_u8);
        let text = CStr::from_bytes_until_nul(&bytes).map_or(&bytes[..], CStr::to_bytes);
        Ok(String::from_utf8_lossy(text).into_owned())
    }

    /// `cuCtxCreate_v2` with flags 0: a context on `device`, made current
    /// on the calling thread. Dropping it (or [`Context::destroy`]) destroys it.
    pub fn create_context(&self, device: Device) -> Result<Context<'_>, CudaError> {
        let mut raw: CUcontext = std::ptr::null_mut();
        // SAFETY: the out-pointer is a live local; flags and device by value.
        let code = unsafe { (self.api.ctx_create)(&mut raw, 0, device.0) };
        self.check("cuCtxCreate_v2", code)?;
        Ok(Context { driver: self, raw, _not_send: PhantomData })
    }

    /// `Ok` for `CUDA_SUCCESS`, else a [`CudaError`] for `call` named by
    /// `cuGetErrorName`.
    pub(crate) fn check(&self, call: &'static str, code: CUresult) -> Result<(), CudaError> {
        if code == CUDA_SUCCESS { Ok(()) } else { Err(self.error(call, code)) }
    }

    pub(crate) fn error(&self, call: &'static str, code: CUresult) -> CudaError {
        CudaError { call, code, name: self.error_name(code) }
    }

    fn error_name(&self, code: CUresult) -> String {
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: the out-pointer is a live local; the driver stores a
        // pointer to a static string there, or null for an unknown code.
        let result = unsafe { (self.api.get_error_name)(code, &mut name) };
        if result == CUDA_SUCCESS && !name.is_null() {
            // SAFETY: on success the pointer is to a NUL-terminated string in
            // the driver's static data, valid while the library is loaded
            // (`self` owns it); it is copied before returning.
            return unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        }
        format!("CUDA_ERROR_{code}")
    }
}

/// The same bits as a byte, whether `c_char` is signed (x86-64) or not (aarch64).
fn c_char_to_u8(byte: c_char) -> u8 {
    u8::from_ne_bytes(byte.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_library_error() {
        let error = Driver::load(OsStr::new("libcuda-does-not-exist.so.1")).unwrap_err();
        match &error {
            LoadError::Library { library, reason } => {
                assert_eq!(library, "libcuda-does-not-exist.so.1");
                assert!(reason.contains("libcuda-does-not-exist.so.1"), "{reason}");
            }
            other => panic!("expected LoadError::Library, got {other:?}"),
        }
        assert!(
            error
                .to_string()
                .starts_with("cannot load the CUDA driver library libcuda-does-not-exist.so.1: ")
        );
        let path = Driver::load(OsStr::new("/nonexistent/dir/libcuda.so.1")).unwrap_err();
        assert!(matches!(path, LoadError::Library { .. }), "{path:?}");
    }

    #[test]
    fn a_library_without_the_driver_symbols_is_a_symbol_error() {
        let error = Driver::load(OsStr::new("libc.so.6")).unwrap_err();
        match &error {
            LoadError::Symbol { library, symbol } => {
                assert_eq!(library, "libc.so.6");
                assert_eq!(*symbol, "cuInit");
            }
            other => panic!("expected LoadError::Symbol, got {other:?}"),
        }
        assert_eq!(
            error.to_string(),
            "the CUDA driver library libc.so.6 has no symbol cuInit (driver too old, or not libcuda)"
        );
    }
}
