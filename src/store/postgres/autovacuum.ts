/**
 * @module store/postgres/autovacuum
 * A warning when autovacuum cannot run on the store's tables. Every operation's row is updated
 * at its claim and its end, its tenant's queue row at every claim, and rows are deleted by the
 * purge: PostgreSQL keeps each old version, and its index entries, until a VACUUM removes them.
 * Without autovacuum the tables and their indexes only grow, and claims slow down over hours,
 * long after whoever set it up has looked. Three things stop it: `autovacuum = off` on the
 * server, `track_counts = off` (autovacuum learns from those counts which tables need it), and
 * `autovacuum_enabled = false` on a table (or on its TOAST table).
 *
 * The store has no logger: it says so as a Node process warning (`process.emitWarning`, code
 * {@link AUTOVACUUM_WARNING}), which reaches standard error whatever runs the store (a library,
 * `sluice serve`, `sluice migrate`), `process.on('warning')` listeners, and nobody under
 * `--no-warnings`. It is read once per store, at its first migration, and each distinct warning
 * is said once per process: a process with a store per schema on one server says the server's once.
 * It is advice, never a refusal: a server may run VACUUM on a schedule of its own.
 */
import type { PgContext } from './connection.js';

/** The `code` of the warning, for `process.on('warning')` listeners. */
export const AUTOVACUUM_WARNING = 'SLUICE_AUTOVACUUM_OFF';

/** What the server and the store's tables say about autovacuum. */
export interface AutovacuumSettings {
  database: string;
  schema: string;
  /** `SHOW autovacuum`: `on` or `off`. */
  autovacuum: string;
  /** `SHOW track_counts`: `on` or `off`. */
  trackCounts: string;
  /** The store's tables autovacuum skips (`autovacuum_enabled = false`): `name` or `name (TOAST)`. */
  tablesOff: string[];
}

const WHY =
  'without VACUUM the tables and indexes Sluice updates and deletes from all the time grow, and ' +
  'claims slow down over hours (docs/operations.md, "keep autovacuum on")';

/** The warnings the settings call for, none when autovacuum runs on every table of the store. */
export function autovacuumWarnings(s: AutovacuumSettings): string[] {
  const warnings: string[] = [];
  const server: string[] = [];
  if (s.autovacuum !== 'on') server.push('autovacuum = off');
  if (s.trackCounts !== 'on') server.push('track_counts = off, which autovacuum needs');
  if (server.length > 0)
    warnings.push(
      `autovacuum does not run on the PostgreSQL server of database "${s.database}" (${server.join('; ')}): ` +
        `${WHY}. Turn it on, or run VACUUM on a schedule of your own`,
    );
  if (s.tablesOff.length > 0)
    warnings.push(
      `autovacuum is turned off for tables of the store's schema "${s.schema}" in database "${s.database}" ` +
        `(autovacuum_enabled = false): ${s.tablesOff.join(', ')}; ${WHY}. ` +
        'ALTER TABLE … RESET (autovacuum_enabled) turns it back on',
    );
  return warnings;
}

/** One statement: the server's settings and the store's tables whose reloptions turn autovacuum off. */
export async function readAutovacuumSettings(ctx: PgContext): Promise<AutovacuumSettings> {
  const [row] = await ctx.query<Omit<AutovacuumSettings, 'schema'>>(
    `SELECT current_database() AS database,
            current_setting('autovacuum') AS autovacuum,
            current_setting('track_counts') AS "trackCounts",
            array(
              SELECT c.relname || CASE WHEN main.off THEN '' ELSE ' (TOAST)' END
                FROM pg_class c
                LEFT JOIN pg_class t ON t.oid = c.reltoastrelid
                CROSS JOIN LATERAL (SELECT EXISTS (
                  SELECT FROM pg_options_to_table(c.reloptions) o
                   WHERE o.option_name = 'autovacuum_enabled' AND NOT o.option_value::boolean) AS off) main
                CROSS JOIN LATERAL (SELECT EXISTS (
                  SELECT FROM pg_options_to_table(t.reloptions) o
                   WHERE o.option_name = 'autovacuum_enabled' AND NOT o.option_value::boolean) AS off) toast
               WHERE c.relnamespace = to_regnamespace($1) AND c.relkind = 'r' AND (main.off OR toast.off)
               ORDER BY c.relname) AS "tablesOff"`,
    [ctx.quoted],
  );
  return { ...row!, schema: ctx.schema };
}

/** The warnings said by this process, each once. */
const said = new Set<string>();

/**
 * Reads the settings and says the warnings not said yet in this process. A failed read says
 * nothing: the check must never fail the migration it follows.
 */
export async function warnIfAutovacuumOff(ctx: PgContext): Promise<void> {
  let warnings: string[];
  try {
    warnings = autovacuumWarnings(await readAutovacuumSettings(ctx));
  } catch {
    return;
  }
  for (const warning of warnings) {
    if (said.has(warning)) continue;
    said.add(warning);
    process.emitWarning(warning, { type: 'SluiceWarning', code: AUTOVACUUM_WARNING });
  }
}
