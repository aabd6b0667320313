// Creates (or drops) a fresh PostgreSQL database for one CI run.
//   node scripts/ci-database.mjs create <server-url>   → prints the new database's URL
//   node scripts/ci-database.mjs drop <database-url>
import pg from 'pg';

const [action, url] = process.argv.slice(2);
if (!url || (action !== 'create' && action !== 'drop')) {
  console.error('usage: ci-database.mjs create <server-url> | drop <database-url>');
  process.exit(2);
}
const target = new URL(url);
const admin = new URL(url);
admin.pathname = '/postgres';
const client = new pg.Client({ connectionString: admin.toString() });
await client.connect();
try {
  if (action === 'create') {
    const name = `sluice_ci_${Date.now()}_${process.pid}`;
    await client.query(`CREATE DATABASE ${name}`);
    target.pathname = `/${name}`;
    console.log(target.toString());
  } else {
    const name = target.pathname.slice(1);
    if (!/^sluice_ci_\d+_\d+$/.test(name)) throw new Error(`refusing to drop ${name}`);
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
} finally {
  await client.end();
}
