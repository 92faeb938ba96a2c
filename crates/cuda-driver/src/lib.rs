//! The few CUDA driver API calls vramd's probe makes, on `libcuda.so.1`
//! loaded at run time: building needs no CUDA, and a missing library or
//! symbol is a [`LoadError`], never a panic. Every driver failure is a
//! [`CudaError`] naming the call and the driver's error name.
//!
//! This crate is the only place in vramd that calls the real driver through
//! `unsafe`; every such block says why it is sound in a `// SAFETY:` comment.
//!
//! ```no_run
//! use cuda_driver::{DEFAULT_LIBRARY, Driver};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let driver = Driver::load(DEFAULT_LIBRARY.as_ref())?;
//! driver.init()?;
//! let device = driver.device(0)?;
//! let context = driver.create_context(device)?;
//! let before = context.memory_info()?;
//! let buffer = context.allocate(1 << 20)?;
//! buffer.free()?;
//! context.destroy()?;
//! # let _ = before;
//! # Ok(())
//! # }
//! ```

mod context;
mod driver;
mod error;
mod ffi;
mod uuid;

pub use context::{Context, DeviceBuffer, MemoryInfo};
pub use driver::{DEFAULT_LIBRARY, Device, Driver};
pub use error::{CudaError, LoadError};
pub use uuid::{format_uuid, parse_uuid};
