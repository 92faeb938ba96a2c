//! The crate's two error types: [`LoadError`] (the library or one of its
//! symbols is missing) and [`CudaError`] (a driver call returned an error).

/// `CUDA_ERROR_INVALID_VALUE`.
pub(crate) const INVALID_VALUE: i32 = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
const OUT_OF_MEMORY: i32 = 2;
/// `CUDA_ERROR_NOT_INITIALIZED`.
const NOT_INITIALIZED: i32 = 3;

/// The driver library could not be loaded, or lacks a symbol vramd needs.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot load the CUDA driver library {library}: {reason}")]
    Library { library: String, reason: String },
    #[error(
        "the CUDA driver library {library} has no symbol {symbol} (driver too old, or not libcuda)"
    )]
    Symbol { library: String, symbol: &'static str },
}

/// A driver call returned something other than `CUDA_SUCCESS`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {name} ({code})")]
pub struct CudaError {
    /// The driver function, e.g. `"cuMemAlloc_v2"`.
    pub call: &'static str,
    /// The `CUresult`.
    pub code: i32,
    /// `cuGetErrorName`'s name for the code (e.g. `CUDA_ERROR_OUT_OF_MEMORY`),
    /// or `CUDA_ERROR_<code>` when the driver has none.
    pub name: String,
}

impl CudaError {
    /// `CUDA_ERROR_OUT_OF_MEMORY` (2).
    pub fn is_out_of_memory(&self) -> bool {
        self.code == OUT_OF_MEMORY
    }

    /// `CUDA_ERROR_NOT_INITIALIZED` (3): `cuInit` was not called or failed.
    pub fn is_not_initialized(&self) -> bool {
        self.code == NOT_INITIALIZED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_call_and_the_code() {
        let error =
            CudaError { call: "cuInit", code: 100, name: "CUDA_ERROR_NO_DEVICE".to_owned() };
        assert_eq!(error.to_string(), "cuInit failed: CUDA_ERROR_NO_DEVICE (100)");
        assert!(!error.is_out_of_memory());
        let oom = CudaError { code: 2, ..error.clone() };
        assert!(oom.is_out_of_memory() && !oom.is_not_initialized());
        assert!(CudaError { code: 3, ..error }.is_not_initialized());
    }
}
