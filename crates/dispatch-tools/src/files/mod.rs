//! File tools: read_files, find_files, edit_file, remove_file, restore_file, file_history.
//! Every path they take goes through [`confine::Confinement`].

pub mod beneath;
pub mod confine;
pub mod edit_file;
pub mod file_history;
pub mod find_files;
pub mod read;
pub mod read_files;
pub mod remove_file;
pub mod restore_file;
pub mod write;

pub use edit_file::EditFile;
pub use file_history::FileHistoryTool;
pub use find_files::FindFiles;
pub use read_files::ReadFiles;
pub use remove_file::RemoveFile;
pub use restore_file::RestoreFile;

#[cfg(test)]
mod dedupe_tests;
#[cfg(test)]
mod edit_tools_tests;
#[cfg(test)]
mod hostile_edit_tests;
#[cfg(test)]
mod hostile_read_tests;
