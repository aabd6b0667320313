// Builds dist/: compiles src/ with tsc, then copies what is read at run time as it is: the SQL
// migrations and the dashboard's page, script and style sheet.
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, readdirSync, rmSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
rmSync(dist, { recursive: true, force: true });
execFileSync(
  process.execPath,
  [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'tsconfig.build.json')],
  {
    stdio: 'inherit',
  },
);

const dashboard = join(root, 'src/dashboard');
function copyAssets(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) copyAssets(path);
    else if (name.endsWith('.sql') || dir === dashboard)
      cpSync(path, join(dist, relative(join(root, 'src'), path)));
  }
}
copyAssets(join(root, 'src'));
const bin = join(dist, 'cli/main.js');
if (existsSync(bin)) chmodSync(bin, 0o755);
