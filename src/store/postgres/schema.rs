//! sluice's own PostgreSQL schema (`--database-schema`, default `sluice`): made ready before the
//! migrations run, found in `public` where an installation from before the setting keeps its
//! tables, moved out of `public` on request, and opened to a sending role.
//!
//! An installation from before `--database-schema` has its tables in `public`. sluice never
//! moves them behind the operator's back (processes of the older version still running would
//! lose their tables mid-statement): it refuses to start on an empty schema beside them, saying
//! the two ways on, `--database-schema public` (everything stays where it is) or
//! `sluice migrate --move-to-schema` with every process stopped ([`move_from_public`]).

use super::{MIGRATION_LOCK, pg};
use crate::store::{StoreError, StoreResult};

/// Every table sluice's migrations create, and `schema_migrations`: what a move takes along
/// (their indexes, identity sequences, constraints and triggers go with them). A migration
/// that creates a table adds it here.
pub const TABLES: &[&str] = &[
    "schema_migrations",
    "settings",
    "tenants",
    "endpoints",
    "messages",
    "deliveries",
    "attempts",
    "endpoint_events",
    "subscriptions",
    "due_endpoints",
    "due_tenants",
    "dispatchers",
];

/// The functions sluice's migrations create other than `send_message`: all named `sluice_…`.
const FUNCTION_PREFIX: &str = "sluice\\_%";

/// The signature of the producers' function (migration 19).
pub const SEND_MESSAGE: &str = "send_message(text, text, jsonb, text)";

/// Does `public` hold an installation of sluice from before `--database-schema` (its
/// `schema_migrations`, by sluice's own columns, and its queue), while `schema` has none?
const IN_PUBLIC_ONLY: &str = "SELECT EXISTS (SELECT 1 FROM pg_attribute \
        WHERE attrelid = to_regclass('public.schema_migrations') \
          AND attname = 'applied_at_ms' AND NOT attisdropped) \
    AND to_regclass('public.deliveries') IS NOT NULL \
    AND to_regclass(format('%I.schema_migrations', $1::text)) IS NULL";

/// Why `public` holds sluice's tables and `schema` none: an error naming both ways on.
fn left_in_public(schema: &str) -> StoreError {
    StoreError::Database(format!(
        "sluice's tables are in schema public (an installation from before \
         --database-schema) and schema {schema} has none: either keep them there with \
         --database-schema public (SLUICE_DATABASE_SCHEMA=public), or stop every sluice process \
         and run `sluice migrate --move-to-schema --database-schema {schema}` to move them"
    ))
}

/// Before the migrations, in their transaction (under their advisory lock): refuse a database
/// whose sluice tables stayed in `public` (see the module's notes), and create `schema` when
/// it is missing (only then: `CREATE SCHEMA IF NOT EXISTS` would need the right to create
/// schemas even when a database administrator made this one for sluice beforehand).
pub(super) async fn prepare(c: &tokio_postgres::Transaction<'_>, schema: &str) -> StoreResult<()> {
    if schema != "public" && in_public_only(c, schema).await? {
        return Err(left_in_public(schema));
    }
    let exists = c
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await
        .map_err(pg)?
        .is_some();
    if !exists {
        // The name is a plain identifier (`schema_problem`): nothing to quote.
        c.batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .map_err(|e| pg(e).context(format!("cannot create schema {schema}")))?;
    }
    Ok(())
}

async fn in_public_only(c: &tokio_postgres::Transaction<'_>, schema: &str) -> StoreResult<bool> {
    let row = c.query_one(IN_PUBLIC_ONLY, &[&schema]).await.map_err(pg)?;
    Ok(row.get(0))
}

/// What [`move_from_public`] moved.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Tables moved (with their indexes, sequences and triggers).
    pub tables: Vec<String>,
    /// Functions moved.
    pub functions: Vec<String>,
}

/// Move an installation from before `--database-schema` out of `public` into `schema`: only
/// sluice's own tables ([`TABLES`]) and functions (`sluice_…`, `send_message`), in one
/// transaction under the migrations' advisory lock, so a process starting meanwhile waits and
/// then finds them moved, and a failure moves nothing. Refused unless `public` holds sluice's
/// tables and `schema` none. Every sluice process must be stopped first: one still running
/// with the old search path would no longer find its tables.
pub async fn move_from_public(c: &mut tokio_postgres::Client, schema: &str) -> StoreResult<Moved> {
    if let Some(valid) = super::schema_problem(schema) {
        return Err(StoreError::Database(format!(
            "database schema {schema:?} must be {valid}"
        )));
    }
    if schema == "public" {
        return Err(StoreError::Database(
            "--move-to-schema moves sluice's tables out of public: name another schema with \
             --database-schema"
                .into(),
        ));
    }
    let tx = c.transaction().await.map_err(pg)?;
    tx.batch_execute("SET LOCAL statement_timeout = 0")
        .await
        .map_err(pg)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg)?;
    if !in_public_only(&tx, schema).await? {
        return Err(StoreError::Database(format!(
            "nothing to move: public holds no sluice installation, or schema {schema} already \
             has one"
        )));
    }
    tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
        .await
        .map_err(pg)?;
    let mut moved = Moved::default();
    for table in TABLES {
        let present = tx
            .query_one(
                "SELECT to_regclass(format('public.%I', $1::text)) IS NOT NULL",
                &[table],
            )
            .await
            .map_err(pg)?
            .get::<_, bool>(0);
        if present {
            tx.batch_execute(&format!("ALTER TABLE public.{table} SET SCHEMA {schema}"))
                .await
                .map_err(pg)?;
            moved.tables.push((*table).to_owned());
        }
    }
    let functions = tx
        .query(
            "SELECT p.oid::regprocedure::text, p.proname FROM pg_proc p \
             WHERE p.pronamespace = 'public'::regnamespace \
               AND (p.proname LIKE $1 OR p.oid = to_regprocedure($2)) ORDER BY 1",
            &[&FUNCTION_PREFIX, &format!("public.{SEND_MESSAGE}")],
        )
        .await
        .map_err(pg)?;
    for f in functions {
        let signature: String = f.get(0);
        tx.batch_execute(&format!("ALTER FUNCTION {signature} SET SCHEMA {schema}"))
            .await
            .map_err(pg)?;
        moved.functions.push(f.get(1));
    }
    // The producers' function runs with a search path of its own, fixed at its creation.
    if moved.functions.iter().any(|f| f == "send_message") {
        tx.batch_execute(&format!(
            "ALTER FUNCTION {schema}.{SEND_MESSAGE} SET search_path = {schema}, pg_temp"
        ))
        .await
        .map_err(pg)?;
    }
    tx.commit().await.map_err(pg)?;
    Ok(moved)
}

/// The statements that let `role` call `send_message` and nothing else of sluice's: `USAGE` on
/// the schema (to name the function; it grants no right on any table) and `EXECUTE` on the
/// function, which runs as sluice's own role (`SECURITY DEFINER`).
pub fn sender_grants(schema: &str, role: &str) -> String {
    let role = quote_identifier(role);
    format!(
        "GRANT USAGE ON SCHEMA {schema} TO {role};\n\
         GRANT EXECUTE ON FUNCTION {schema}.{SEND_MESSAGE} TO {role};\n"
    )
}

/// An identifier as SQL writes it, in double quotes (a role's name may hold anything).
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_quote_the_role_and_name_the_function() {
        let sql = sender_grants("sluice", "app\"x");
        assert!(sql.contains("GRANT USAGE ON SCHEMA sluice TO \"app\"\"x\";"));
        assert!(sql.contains(
            "GRANT EXECUTE ON FUNCTION sluice.send_message(text, text, jsonb, text) TO \"app\"\"x\";"
        ));
        assert!(!sql.contains("SELECT") && !sql.contains("ALL"));
    }
}
