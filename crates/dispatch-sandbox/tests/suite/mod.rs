mod fixture;
mod properties;
mod review;
mod table;
