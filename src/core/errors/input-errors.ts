/**
 * @module core/errors/input-errors
 * Rejections of a submission before anything is stored: the client may fix the cause and retry
 * with the same id.
 */
import { engineMade } from './engine-made.js';
import { hasCode, SluiceError } from './sluice-error.js';

export interface InputIssue {
  path: Array<string | number>;
  message: string;
}

/**
 * Issues an `InputInvalid` keeps. An input of `maxInputBytes` can fail once per element, and each
 * issue travels into the error, the HTTP answer and the log; the first ones say what to fix.
 */
export const MAX_INPUT_ISSUES = 50;

/**
 * The input failed the kind's schema. `issues` lists the failing paths (the first
 * `MAX_INPUT_ISSUES`); `omitted` counts the ones left out.
 */
export class InputInvalid extends SluiceError {
  readonly issues: InputIssue[];
  readonly omitted: number;
  constructor(kind: string, all: InputIssue[]) {
    const issues = all.slice(0, MAX_INPUT_ISSUES);
    const first = issues[0];
    super(
      'input-invalid',
      `input does not match the schema of kind ${kind}` +
        (first ? `: ${first.path.join('.') || '(root)'}: ${first.message}` : ''),
    );
    this.issues = issues;
    this.omitted = all.length - issues.length;
    // A refusal of a call: the engine's own, wherever it is made (core/errors/engine-made.ts).
    engineMade(this);
  }
  get details(): unknown {
    return this.omitted > 0 ? { issues: this.issues, omitted: this.omitted } : { issues: this.issues };
  }
}
export const isInputInvalid = (e: unknown): e is InputInvalid => hasCode(e, 'input-invalid');

/** The input is not plain JSON (undefined, a function, a BigInt, a cycle, a non-finite number). */
export class InputNotJson extends SluiceError {
  /** What is not JSON, and where (`(root) is a function`), for a message about another value. */
  readonly reason: string;
  constructor(reason: string) {
    super('input-not-json', `input must be plain JSON: ${reason}`);
    this.reason = reason;
    engineMade(this);
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
    // A refusal of a call: the engine's own, wherever it is made (core/errors/engine-made.ts).
    engineMade(this);
  }
}
export const isInvalidArgument = (e: unknown): e is InvalidArgument => hasCode(e, 'invalid-argument');
