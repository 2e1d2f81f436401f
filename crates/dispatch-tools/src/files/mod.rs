//! File tools: read_files, find_files, edit_file, remove_file, restore_file, file_history.
//! Every path they take goes through [`confine::Confinement`].

pub mod confine;
pub mod find_files;
pub mod read;
pub mod read_files;

pub use find_files::FindFiles;
pub use read_files::ReadFiles;

#[cfg(test)]
mod hostile_read_tests;
