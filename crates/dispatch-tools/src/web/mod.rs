//! Web tools: http_request and download_file, and the network guard and client every tool that
//! reaches a URL goes through.

pub mod client;
pub mod download_file;
pub mod guard;
pub mod http_request;
#[cfg(test)]
mod test_server;

pub use download_file::DownloadFile;
pub use guard::NetPolicy;
pub use http_request::HttpRequest;
