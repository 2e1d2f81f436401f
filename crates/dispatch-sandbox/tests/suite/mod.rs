mod fixture;
mod properties;
mod table;
