import * as z from 'zod';
import { ConfigError } from '../common/errors.js';

/**
 * The form's own verdict on a POST: the `expect` block of a job (or the stack's default, the
 * `expect` setting) says what an accepted answer looks like, and judgeFormAnswer reads the
 * answer by it. Without a block, today's rule stands: 2xx and 3xx are `submitted`
 * (functions/records/decisions.ts decideTargetResponse).
 *
 * Matching is plain text, case-insensitive, on a bounded read of the answer
 * (functions/target/session.ts MAX_VERDICT_BYTES), with every run of whitespace read as one
 * space. No user-supplied regular expression ever runs on a target's body: a backtracking
 * engine (JavaScript's) can take exponential time on a hostile page, and a worker slot stuck in
 * a match would hold its plan thread; substring search is linear.
 */

/** At most this many markers per list; each at most MAX_MARKER_LENGTH characters. */
export const MAX_MARKERS = 10;
export const MAX_MARKER_LENGTH = 200;
const MAX_STATUS_RULES = 20;
const MAX_LOCATION_LENGTH = 2048;

/** `200`, `"302"`, `"2xx"`, `"3xx"`, or a range `"200-299"`: within 200-399, the answers that were ever `submitted`. */
const STATUS_TEXT = /^(?:[23]xx|[23]\d\d(?:-[23]\d\d)?)$/;

const StatusRule = z.union([
  z
    .number({ error: 'must be a status code (200-399) or a string such as "2xx" or "200-299"' })
    .int({ error: 'must be a whole status code' })
    .min(200, {
      error: 'must be between 200 and 399 (a 4xx or 5xx answer always fails TARGET_HTTP_<status>)',
    })
    .max(399, {
      error: 'must be between 200 and 399 (a 4xx or 5xx answer always fails TARGET_HTTP_<status>)',
    }),
  z.string().regex(STATUS_TEXT, {
    error: 'must be a status (200-399), "2xx", "3xx" or a range such as "200-299"',
  }),
]);

const Marker = z
  .string({ error: 'must be a string' })
  .max(MAX_MARKER_LENGTH, { error: `must be at most ${MAX_MARKER_LENGTH} characters` })
  .regex(/\S/, { error: 'must not be empty or blank' });

const Markers = (what: string) =>
  z
    .array(Marker, { error: 'must be a list of strings' })
    .min(1, { error: 'must name at least one marker (leave the field out instead)' })
    .max(MAX_MARKERS, { error: `must have at most ${MAX_MARKERS} markers` })
    .meta({ description: what });

export const FormExpectationSchema = z
  .strictObject({
    status: z
      .array(StatusRule, { error: 'must be a list of status codes or ranges' })
      .min(1, { error: 'must name at least one status (leave the field out for 2xx and 3xx)' })
      .max(MAX_STATUS_RULES, { error: `must have at most ${MAX_STATUS_RULES} entries` })
      .optional()
      .meta({
        description:
          'Answers that count as accepted: codes (302) or ranges ("2xx", "200-299"), within 200-399. Default 2xx and 3xx. A 4xx/5xx answer always fails TARGET_HTTP_<status>.',
      }),
    body_includes: Markers(
      'Text that must appear in the answer (a success marker such as "Thank you"); absent: failed FORM_UNCONFIRMED. Plain text, case-insensitive.',
    ).optional(),
    body_excludes: Markers(
      'Text that must not appear in the answer (failure markers such as "verification failed"); present: failed FORM_REJECTED. Plain text, case-insensitive.',
    ).optional(),
    location: z
      .string({ error: 'must be a string' })
      .min(1, { error: 'must not be empty' })
      .max(MAX_LOCATION_LENGTH, { error: `must be at most ${MAX_LOCATION_LENGTH} characters` })
      .meta({
        description:
          'Where a redirect must go: a prefix of the Location\'s path ("/thanks") or of its absolute URL, "*" matching any run of characters; case-insensitive. Another Location: failed FORM_REJECTED; no Location: failed FORM_UNCONFIRMED.',
      })
      .optional(),
  })
  .superRefine((expect, ctx) => {
    expect.status?.forEach((rule, i) => {
      if (typeof rule === 'string' && rule.includes('-')) {
        const [low, high] = rule.split('-').map(Number) as [number, number];
        if (low > high) {
          ctx.addIssue({
            code: 'custom',
            path: ['status', i],
            message: `range ${rule} ends before it starts`,
          });
        }
      }
    });
  })
  .meta({
    description:
      "How to tell that the form accepted the record, from its answer to the POST. Omitted: the stack's default (the expect setting), else 2xx/3xx = submitted. {} = 2xx/3xx, overriding the stack's default.",
  });

export type FormExpectation = z.output<typeof FormExpectationSchema>;

/**
 * The text of the form's answer as the worker read it. The text itself stays inside: no
 * field of this object serializes it (see functions/target/answer-text.ts), so it cannot
 * reach a row, a log line or a metric.
 */
export interface AnswerBody {
  /** Whether the normalized text contains `marker` (case-insensitive, whitespace runs = one space). */
  contains(marker: string): boolean;
  /** False when the answer was longer than the bounded read: only its beginning was searched. */
  readonly complete: boolean;
  /** False when reading the body failed (a reset or timeout after the status came). */
  readonly readable: boolean;
  /** Bytes read. */
  readonly bytes: number;
}

/** The form's answer to the POST, as judged: status, resolved Location (if any) and body. */
export interface FormAnswer {
  status: number;
  /** The Location header resolved against the submit URL; the raw header when it is no URL. */
  location?: string;
  /** Present when the expectation has body markers (only then is the text kept). */
  body?: AnswerBody;
}

/** The form's verdict. `rule`: which check decided, e.g. `body_excludes[0]`; never page text. */
export type FormVerdict =
  | { accepted: true }
  | { accepted: false; reason: 'FORM_REJECTED' | 'FORM_UNCONFIRMED'; rule: string };

/** Whether the expectation needs the answer's text (so the session keeps it). */
export function needsBody(expect: FormExpectation | undefined): boolean {
  return (expect?.body_includes?.length ?? 0) + (expect?.body_excludes?.length ?? 0) > 0;
}

function statusMatches(status: number, rule: number | string): boolean {
  if (typeof rule === 'number') return status === rule;
  if (rule.endsWith('xx')) return Math.floor(status / 100) === Number(rule[0]);
  const [low, high = low] = rule.split('-').map(Number) as [number, number?];
  return status >= low && status <= high;
}

/**
 * Whether `target` starts with `pattern`, where `*` in the pattern matches any run of
 * characters (case-insensitive). Greedy leftmost search for each literal piece in turn: linear
 * in the target for each piece, no backtracking.
 */
export function matchesLocationPattern(target: string, pattern: string): boolean {
  const text = target.toLowerCase();
  const [first = '', ...rest] = pattern.toLowerCase().split('*');
  if (!text.startsWith(first)) return false;
  let at = first.length;
  for (const piece of rest) {
    if (piece === '') continue;
    const found = text.indexOf(piece, at);
    if (found < 0) return false;
    at = found + piece.length;
  }
  return true;
}

/** The Location as the pattern reads it: path + query for a pattern starting with `/`, else the whole URL. */
function locationMatches(location: string, pattern: string): boolean {
  if (!pattern.startsWith('/')) return matchesLocationPattern(location, pattern);
  try {
    const url = new URL(location);
    return matchesLocationPattern(`${url.pathname}${url.search}`, pattern);
  } catch {
    return false;
  }
}

function cut(body: AnswerBody): string {
  return body.complete ? '' : ` (only the first ${body.bytes} bytes of the answer were read)`;
}

/**
 * Reads a 2xx/3xx answer by the expectation, in order: status, failure markers, location, success
 * markers, failure markers that could not be ruled out (the answer was cut at the bounded read),
 * a required redirect that did not come. A failure marker outranks a success marker (a form page
 * that says both "Thank you for trying" and "verification failed" refused the record).
 */
export function judgeFormAnswer(expect: FormExpectation, answer: FormAnswer): FormVerdict {
  const rejected = (rule: string): FormVerdict => ({ accepted: false, reason: 'FORM_REJECTED', rule });
  const unconfirmed = (rule: string): FormVerdict => ({ accepted: false, reason: 'FORM_UNCONFIRMED', rule });
  if (expect.status && !expect.status.some((rule) => statusMatches(answer.status, rule))) {
    return rejected(`status ${answer.status} not in [${expect.status.join(', ')}]`);
  }
  const body = answer.body;
  if (needsBody(expect) && !body?.readable) {
    return unconfirmed('body: the answer could not be read');
  }
  if (body) {
    const hit = expect.body_excludes?.findIndex((marker) => body.contains(marker)) ?? -1;
    if (hit >= 0) return rejected(`body_excludes[${hit}]`);
  }
  if (expect.location !== undefined && answer.location !== undefined) {
    if (!locationMatches(answer.location, expect.location)) {
      return rejected(`location: redirect not to ${expect.location}`);
    }
  }
  if (body) {
    const missing = expect.body_includes?.findIndex((marker) => !body.contains(marker)) ?? -1;
    if (missing >= 0) return unconfirmed(`body_includes[${missing}]${cut(body)}`);
    // A failure marker after the bounded read would go unseen: an answer read only in part
    // cannot confirm that none is there, as an unreadable one cannot.
    if (expect.body_excludes?.length && !body.complete) return unconfirmed(`body_excludes${cut(body)}`);
  }
  if (expect.location !== undefined && answer.location === undefined) {
    return unconfirmed(`location: no redirect (expected ${expect.location})`);
  }
  return { accepted: true };
}

/**
 * Parses the stack-wide default (the `expect` setting: a JSON string from CDK context or the
 * FORM_EXPECT variable, or an object from cdk.json or props); a ConfigError names `name`.
 */
export function parseFormExpectation(raw: unknown, name: string): FormExpectation | undefined {
  if (raw === undefined || raw === null || raw === '') return undefined;
  let value = raw;
  if (typeof raw === 'string') {
    try {
      value = JSON.parse(raw);
    } catch {
      throw new ConfigError(
        name,
        `must be a JSON object such as {"body_excludes":["verification failed"]}, got ${raw}`,
      );
    }
  }
  const parsed = FormExpectationSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue?.path.length ? `${issue.path.map(String).join('.')}: ` : '';
    throw new ConfigError(name, `${where}${issue?.message ?? 'is invalid'}`);
  }
  return parsed.data;
}
