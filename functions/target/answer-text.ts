import { inspect } from 'node:util';

/**
 * The text of the form's answer to the POST, kept only to look for the job's markers
 * (functions/records/form-verdict.ts). Pages can carry personal data, and a form may echo the
 * token back, so the text is a private field: JSON.stringify (the logger), util.inspect and
 * structuredClone see only the byte count and the flags, never the text.
 *
 * Compared as plain text: lower-cased, every run of whitespace one space, on both sides. No
 * regular expression from a job ever runs on it (linear substring search only).
 */
export class AnswerText {
  readonly #text: string;

  private constructor(
    text: string,
    /** False when the answer was longer than the bounded read: only its beginning is kept. */
    readonly complete: boolean,
    /** False when reading the body failed after the status arrived. */
    readonly readable: boolean,
    readonly bytes: number,
  ) {
    this.#text = normalize(text);
  }

  /** The answer's first bytes, decoded as UTF-8 (bad sequences become U+FFFD, never an error). */
  static of(bytes: Uint8Array, complete: boolean): AnswerText {
    return new AnswerText(new TextDecoder('utf-8').decode(bytes), complete, true, bytes.byteLength);
  }

  /** Reading the body failed: nothing can be confirmed from it. */
  static unreadable(): AnswerText {
    return new AnswerText('', false, false, 0);
  }

  contains(marker: string): boolean {
    const wanted = normalize(marker).trim();
    return wanted !== '' && this.#text.includes(wanted);
  }

  toJSON(): Record<string, unknown> {
    return { bytes: this.bytes, complete: this.complete, readable: this.readable };
  }

  [inspect.custom](): string {
    return `AnswerText(${this.bytes} bytes, text withheld)`;
  }
}

function normalize(text: string): string {
  return text.toLowerCase().replace(/\s+/g, ' ');
}
