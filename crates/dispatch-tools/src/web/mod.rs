//! Tools that reach the web, and their pure parts: turning a fetched page into text
//! (extract), trimming text to what the call asked about (filter), the search backends.

pub mod extract;
pub mod filter;
pub mod public_api_list;
pub mod search;
pub mod search_web;

pub use public_api_list::PublicApiList;
pub use search::{SearchBackend, SearchConfig};
pub use search_web::SearchWeb;
