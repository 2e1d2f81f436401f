// The console script arrives with the console work.
