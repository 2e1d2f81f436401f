//! Tools that reach the web, the network guard and client every one of them goes through, and
//! their pure parts: turning a fetched page into text (extract), trimming text to what the
//! call asked about (filter), the search backends.

pub mod client;
pub mod download_file;
pub mod extract;
pub mod extract_eval;
pub mod fetch_page;
pub mod filter;
mod furniture;
pub mod guard;
pub mod http_request;
pub mod public_api_list;
pub mod search;
pub mod search_web;
#[cfg(test)]
pub(crate) mod test_server;

pub use download_file::DownloadFile;
pub use fetch_page::FetchPage;
pub use guard::NetPolicy;
pub use http_request::HttpRequest;
pub use public_api_list::PublicApiList;
pub use search::{SearchBackend, SearchConfig};
pub use search_web::SearchWeb;
