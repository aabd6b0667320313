/**
 * @module config/inputs
 * Values read from a command line or the environment, refused in one line that names where each
 * came from and what it was: `Number('abc')` would otherwise surface as `NaN` in a message about
 * something else, and `Number('')` as port 0, a random port, without a word.
 */
import { InvalidArgument } from '../core/errors/index.js';

/** A TCP port from text (`--port`, `PORT`, `STUB_PORT`): whole digits, 0 to 65,535. */
export function portFrom(where: string, text: string): number {
  const port = /^\d{1,5}$/.test(text.trim()) ? Number(text.trim()) : Number.NaN;
  if (!(port >= 0 && port <= 65_535))
    throw new InvalidArgument(`${where} must be a port number from 0 to 65535, not ${JSON.stringify(text)}`);
  return port;
}

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** The log level `SLUICE_LOG_LEVEL` names, else `fallback`. */
export function logLevel(fallback: string, env: NodeJS.ProcessEnv = process.env): string {
  const level = env.SLUICE_LOG_LEVEL;
  if (level === undefined || level === '') return fallback;
  if (!(LEVELS as readonly string[]).includes(level))
    throw new InvalidArgument(
      `SLUICE_LOG_LEVEL must be one of ${LEVELS.join(', ')}, not ${JSON.stringify(level)}`,
    );
  return level;
}

/** The scheme of a URL (`postgres` of `postgres://…`), or undefined for anything else (a path). */
export function urlScheme(text: string): string | undefined {
  return /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(text)?.[1];
}

/** JSON given to a flag, or a refusal naming the flag. */
export function jsonFrom(where: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new InvalidArgument(`${where} is not JSON: ${(error as Error).message}`);
  }
}
