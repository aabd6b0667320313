/**
 * @module core/errors/input-errors
 * Rejections of a submission before anything is stored: the client may fix the cause and retry
 * with the same id.
 */
import { hasCode, SluiceError } from './sluice-error.js';

export interface InputIssue {
  path: Array<string | number>;
  message: string;
}

/** The input failed the kind's schema. `issues` lists the failing paths. */
export class InputInvalid extends SluiceError {
  readonly issues: InputIssue[];
  constructor(kind: string, issues: InputIssue[]) {
    const first = issues[0];
    super(
      'input-invalid',
      `input does not match the schema of kind ${kind}` +
        (first ? `: ${first.path.join('.') || '(root)'}: ${first.message}` : ''),
    );
    this.issues = issues;
  }
  get details(): unknown {
    return { issues: this.issues };
  }
}
export const isInputInvalid = (e: unknown): e is InputInvalid => hasCode(e, 'input-invalid');

/** The input is not plain JSON (undefined, a function, a BigInt, a cycle, a non-finite number). */
export class InputNotJson extends SluiceError {
  constructor(reason: string) {
    super('input-not-json', `input must be plain JSON: ${reason}`);
  }
}
export const isInputNotJson = (e: unknown): e is InputNotJson => hasCode(e, 'input-not-json');

export class InputTooLarge extends SluiceError {
  readonly limitBytes: number;
  readonly actualBytes: number;
  constructor(limitBytes: number, actualBytes: number) {
    super('input-too-large', `input is ${actualBytes} bytes; the limit is ${limitBytes}`);
    this.limitBytes = limitBytes;
    this.actualBytes = actualBytes;
  }
  get details(): unknown {
    return { limitBytes: this.limitBytes, actualBytes: this.actualBytes };
  }
}
export const isInputTooLarge = (e: unknown): e is InputTooLarge => hasCode(e, 'input-too-large');

export class UnknownKind extends SluiceError {
  constructor(kind: string) {
    super('kind-unknown', `no operation kind named ${JSON.stringify(kind)} is defined`);
  }
}
export const isUnknownKind = (e: unknown): e is UnknownKind => hasCode(e, 'kind-unknown');

/** A caller passed an argument outside its documented range (an id too long, a bad tenant). */
export class InvalidArgument extends SluiceError {
  constructor(message: string) {
    super('invalid-argument', message);
  }
}
export const isInvalidArgument = (e: unknown): e is InvalidArgument => hasCode(e, 'invalid-argument');
