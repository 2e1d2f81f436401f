//! Tools that reach the web: search_web and public_api_list (this file declares only the
//! modules of the search helper; the other web tools join at merge).

pub mod public_api_list;
pub mod search;
pub mod search_web;

pub use public_api_list::PublicApiList;
pub use search::{SearchBackend, SearchConfig};
pub use search_web::SearchWeb;
