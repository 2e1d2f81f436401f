//! Arithmetic.

mod calculate;
pub mod evaluate;

pub use calculate::Calculate;
