// The two implementations of store::Conn (sql.h), each opened with its
// schema migrated to the version this build writes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "store/sql.h"

namespace kiln::store {

// DATA_DIR/kiln.db in WAL mode (store.h describes the rules), migrated to
// kSchemaVersion. `create`: make the directory and file if absent.
Result<std::unique_ptr<Conn>> OpenSqlite(const std::string& data_dir, bool create,
                                         int busy_timeout_ms);

// `pool_size` connections to the PostgreSQL database `url` names
// ("postgresql://user@host:port/db?..."), its schema migrated to
// kPostgresSchemaVersion under an advisory lock (nodes starting together
// migrate once). libpq is loaded on this first use (dlopen), so a node
// without PostgreSQL never maps it. kUnavailable when the server cannot be
// reached, kFailedPrecondition when libpq is not installed or the schema is
// newer than this build's.
Result<std::vector<std::unique_ptr<Conn>>> OpenPostgres(const std::string& url, int pool_size);

// "postgresql://user:secret@host/db" -> "postgresql://user@host/db": for logs
// and errors (the password never appears in either).
std::string RedactUrl(const std::string& url);
// Whether `url` names a PostgreSQL database (postgresql:// or postgres://).
bool IsPostgresUrl(std::string_view url);

}  // namespace kiln::store
