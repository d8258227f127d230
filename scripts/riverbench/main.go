package main

import (
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/riverqueue/river"
	_ "github.com/riverqueue/river/riverdriver/riverpgxv5"
	_ "github.com/riverqueue/river/rivermigrate"
)

func main() {}
