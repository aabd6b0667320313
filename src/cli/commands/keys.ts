/**
 * @module cli/commands/keys
 * `sluice keys new`: a new random key (http/auth.ts `newApiKey`) and its config form.
 * `sluice keys hash`: the `sha256:<hex>` form of an API key, for the config file, so the key
 * itself never needs to be stored. Reads the key from stdin (so it stays out of shell history)
 * or takes it as an argument.
 */
import type { Command } from 'commander';
import { InvalidArgument } from '../../core/errors/index.js';
import { hashApiKey, newApiKey } from '../../http/auth.js';

export function keysCommand(program: Command): void {
  const keys = program.command('keys').description('API keys');
  keys
    .command('new')
    .description('print a new random key, then its sha256:<hex> form for the config (two lines)')
    .action(() => {
      const key = newApiKey();
      console.log(key);
      console.log(hashApiKey(key));
    });
  keys
    .command('hash [key]')
    .description("print a key's sha256:<hex> form for the config (reads stdin when no key is given)")
    .action(async (key: string | undefined) => {
      let value = key;
      if (value === undefined) {
        const chunks: Buffer[] = [];
        for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
        value = Buffer.concat(chunks).toString('utf8').trim();
      }
      if (!value) throw new InvalidArgument('no key given: pass it as an argument or on stdin');
      // A bearer token has no whitespace (RFC 6750): a key with some would never match.
      if (/\s/.test(value)) throw new InvalidArgument('an API key cannot contain whitespace');
      console.log(hashApiKey(value));
    });
}
