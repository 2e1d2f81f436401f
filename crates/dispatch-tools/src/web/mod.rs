//! The web tools' pure parts: turning a fetched page into text (extract) and trimming that text
//! to what the call asked about (filter). No network access here except the optional
//! model-backed filter.

pub mod extract;
pub mod filter;
