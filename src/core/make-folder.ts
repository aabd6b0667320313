/**
 * @module core/make-folder
 * `mkdir -p` that fails instead of spinning. Node's recursive mkdir reads ENOENT as "the parent
 * is missing": it makes the parent and tries the folder again, for as long as that answers
 * ENOENT. A file system that answers ENOENT for a child it will never hold while its parent
 * exists (procfs: `/proc/x`) keeps it there forever, a busy loop inside Node that the event loop
 * never gets back from (the promise form never settles either). Here a folder is tried again at
 * most once, after its parent was made or found.
 */
import { mkdirSync, statSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';

/**
 * Makes `path` and any missing parents, each it makes with `mode` (as the umask leaves it); throws
 * the first error that stops it, naming the folder.
 */
export function makeFolder(path: string, mode?: number): void {
  const folder = resolve(path);
  const parent = dirname(folder);
  try {
    mkdirSync(folder, { mode });
    return;
  } catch (error) {
    if (code(error) === 'EEXIST') {
      mustBeFolder(folder);
      return;
    }
    if (code(error) !== 'ENOENT' || parent === folder) throw error;
  }
  makeFolder(parent, mode);
  try {
    mkdirSync(folder, { mode });
  } catch (error) {
    // Another process made it meanwhile: as good as made here.
    if (code(error) === 'EEXIST') {
      mustBeFolder(folder);
      return;
    }
    if (code(error) !== 'ENOENT') throw error;
    throw Object.assign(new Error(`${parent} exists but takes no new folder ${basename(folder)} (ENOENT)`), {
      code: 'ENOENT',
    });
  }
}

function mustBeFolder(folder: string): void {
  // A dangling symbolic link throws here, as it should: nothing can be made behind it.
  if (!statSync(folder).isDirectory()) {
    throw Object.assign(new Error(`${folder} exists and is not a folder`), { code: 'ENOTDIR' });
  }
}

const code = (error: unknown) => (error as NodeJS.ErrnoException | null)?.code;
