/**
 * @module core/json-text
 * A value already written as JSON. The stores keep its text as it is (store/sqlite/rows.ts
 * `jsonText`) instead of writing the value out again: an effect's result is copied as JSON when
 * the provider answers (effects/attempt-marks.ts), and that copy is what the journal keeps.
 */
export class JsonText {
  constructor(readonly text: string) {}

  /** The value the text stands for, a fresh copy on every call. */
  value(): unknown {
    return JSON.parse(this.text);
  }
}
