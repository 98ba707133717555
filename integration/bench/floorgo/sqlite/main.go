// Command sqlite is the bench's Go floor for verbs that read the store
// (scenario floor): a static Go program that opens the SQLite file named
// by its argument with the driver strata uses (modernc.org/sqlite, pure
// Go), reads one value and exits. It creates the file, with one table in
// WAL mode as a store is, when it does not exist yet. Its time is what a
// commit, a run or a ws create pays before strata's own work starts.
package main

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"

	_ "modernc.org/sqlite"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sqlite FILE")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "sqlite:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			return err
		}
		defer db.Close()
		for _, q := range []string{"PRAGMA journal_mode = WAL", "CREATE TABLE refs (name TEXT PRIMARY KEY, id BLOB)", "INSERT INTO refs VALUES ('main', x'00')"} {
			if _, err := db.Exec(q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	var id []byte
	return db.QueryRow("SELECT id FROM refs WHERE name = 'main'").Scan(&id)
}
