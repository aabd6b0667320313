/**
 * @module observability/logger
 * The logger Sluice makes when it is given none: pino, JSON lines on stderr, named `sluice`.
 * An error is written with its cause as a record of its own (`err.cause`, with its type, message
 * and code), not appended to the error's message: Sluice's store errors already carry the
 * driver's message in their own (`PostgreSQL 57P01: terminating connection…`), and pino's default
 * serializer wrote it twice, the database's code of the cause nowhere.
 */
import pino, { type DestinationStream, type Logger } from 'pino';

/** A `sluice` logger at `level`, to stderr unless told otherwise. */
export function sluiceLogger(level: string, destination: DestinationStream = pino.destination(2)): Logger {
  return pino({ name: 'sluice', level, serializers: { err: pino.stdSerializers.errWithCause } }, destination);
}
