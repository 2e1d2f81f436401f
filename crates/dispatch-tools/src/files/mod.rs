//! File tools: read_files, find_files, edit_file, remove_file, restore_file, file_history.
//! Every path they take goes through [`confine::Confinement`].

pub mod confine;
