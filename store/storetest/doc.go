// Package storetest gives tests their own PostgreSQL database, migrated and empty.
//
// Tests run against a real PostgreSQL server, never a mock. The server comes from
// TEST_DATABASE_URL (else DATABASE_URL); `make test` sets it, starting the private dev
// cluster of scripts/devdb.sh when neither is given. A test without a server fails, it
// does not skip.
//
// NewDB clones a template database, taskservice_template_<hash of the migration
// files>, which the first caller on a server builds with migrations.Up. A PostgreSQL
// advisory lock serialises that build across test binaries running at the same time,
// and a template whose build was interrupted is rebuilt, so changing a migration simply
// yields a new template. Cloning happens inside the server and costs about a tenth
// of a second, so every test can have a database of its own:
//
//	func TestSomething(t *testing.T) {
//		pool := storetest.NewPool(t) // fresh, migrated, dropped when t ends
//		...
//	}
//
// Databases are named test_<unix time>_<random> and dropped in t.Cleanup. Those left
// behind by a killed test binary are dropped by a later run once they are a day old and
// nobody is connected to them.
package storetest
