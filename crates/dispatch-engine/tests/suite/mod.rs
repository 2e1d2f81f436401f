mod smoke;
pub mod support;
