/** The built CLI (`dist/cli/main.js`) run as a child process, for tests of its commands. */
import { execFile } from 'node:child_process';
import { join } from 'node:path';

const MAIN = join(import.meta.dirname, '../../dist/cli/main.js');

export interface Ran {
  status: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `sluice <args>` and answers its exit status and output. Asynchronous, so an engine in the
 * test's process keeps working meanwhile. `env` goes over this process's environment, with
 * `SLUICE_DB` unset unless given (a value of `undefined` unsets a variable).
 */
export function runCli(
  args: string[],
  options: { cwd?: string; env?: Record<string, string | undefined> } = {},
): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [MAIN, ...args],
      { cwd: options.cwd, encoding: 'utf8', env: { ...process.env, SLUICE_DB: undefined, ...options.env } },
      (error, stdout, stderr) => resolve({ status: error ? (error.code as number) : 0, stdout, stderr }),
    );
  });
}
