import { distance } from 'fastest-levenshtein';
import * as z from 'zod';
import type { CaptchaTask, CaptchaType } from '../captchaai/types.js';
import { FormExpectationSchema } from './form-verdict.js';

/**
 * The job message: one SQS message body per record. This zod schema is the single source;
 * `schema/job.schema.json` is generated from it (`npm run schema`) so upstream jobs in any
 * language can validate before sending, and a test fails when the two drift apart.
 *
 * Two forms are accepted:
 * - flat (the seed article's): `{record_key, sitekey, pageurl, submit_url}` = reCAPTCHA v2;
 * - full: the flat fields plus `captcha: {type, …}`, extra `form` fields and `token_field`.
 *
 * Validation here is pure (shape, sizes, URL syntax). The worker adds the allowlist and DNS
 * checks (functions/target/allowlist.ts) because those depend on its configuration.
 */

/** SQS's own ceiling for a message body; anything larger cannot be a real job message. */
export const MAX_MESSAGE_BYTES = 262_144;
export const MAX_RECORD_KEY_LENGTH = 256;
export const MAX_URL_LENGTH = 2048;
export const MAX_SITEKEY_LENGTH = 256;
export const MAX_FORM_FIELDS = 50;
export const MAX_FORM_FIELD_NAME_LENGTH = 100;
export const MAX_FORM_VALUE_LENGTH = 4096;
/** Base64 characters of an image CAPTCHA (~150 KB of image), well inside an SQS message. */
export const MAX_IMAGE_BODY_LENGTH = 200_000;

/** record_key and batch_id share one rule: 1-256 printable ASCII characters, no spaces. */
const KeyString = z
  .string({ error: (i) => (i.input === undefined ? 'is required' : 'must be a string') })
  .min(1, { error: 'must not be empty' })
  .max(MAX_RECORD_KEY_LENGTH, { error: `must be at most ${MAX_RECORD_KEY_LENGTH} characters` })
  .regex(/^[\x21-\x7e]+$/, { error: 'must be printable ASCII without spaces' });

const RecordKey = KeyString.meta({ description: 'Unique key of the record; one outcome row per key.' });

/** Same rules as record_key (and the same length limit), so it is safe as a DynamoDB index key. */
export const BatchId = KeyString.meta({
  description:
    'Optional batch the record belongs to; stored on its outcome row so the batch can be read back and waited for. A record sent again under another batch keeps the batch of its first row.',
});

const Sitekey = z
  .string({ error: (i) => (i.input === undefined ? 'is required' : 'must be a string') })
  .min(1, { error: 'must not be empty' })
  .max(MAX_SITEKEY_LENGTH, { error: `must be at most ${MAX_SITEKEY_LENGTH} characters` })
  .regex(/^[A-Za-z0-9_-]+$/, { error: 'must contain only letters, digits, "_" and "-"' });

function hasNoCredentials(value: string): boolean {
  try {
    const url = new URL(value);
    return url.username === '' && url.password === '';
  } catch {
    return true; // z.url() reports the syntax error
  }
}

const HttpUrl = z
  .url({
    protocol: /^https?$/,
    error: (i) =>
      i.input === undefined
        ? 'is required'
        : typeof i.input !== 'string'
          ? 'must be a string'
          : 'must be an absolute http(s) URL',
  })
  .max(MAX_URL_LENGTH, { error: `must be at most ${MAX_URL_LENGTH} characters` })
  .refine(hasNoCredentials, { error: 'must not contain credentials (user:password@)' });

const Action = z
  .string({ error: 'must be a string' })
  .regex(/^[A-Za-z0-9_/-]{1,100}$/, { error: 'must be 1-100 letters, digits, "_", "/" or "-"' });

const MinScore = z
  .number({ error: 'must be a number' })
  .min(0.1, { error: 'must be between 0.1 and 0.9' })
  .max(0.9, { error: 'must be between 0.1 and 0.9' });

const Invisible = z.boolean({ error: 'must be true or false' });

const FieldName = z
  .string()
  .regex(/^[A-Za-z0-9_\-[\].:]+$/, { error: 'must be letters, digits and "_-[].:" only' })
  .max(MAX_FORM_FIELD_NAME_LENGTH, { error: `must be at most ${MAX_FORM_FIELD_NAME_LENGTH} characters` });

const TYPE_LIST = 'recaptcha_v2, recaptcha_v3, recaptcha_enterprise, turnstile or image';

const CaptchaSpec = z.discriminatedUnion(
  'type',
  [
    z.strictObject({
      type: z.literal('recaptcha_v2'),
      sitekey: Sitekey.optional(),
      invisible: Invisible.optional(),
    }),
    z.strictObject({
      type: z.literal('recaptcha_v3'),
      sitekey: Sitekey.optional(),
      action: Action.optional(),
      min_score: MinScore.optional(),
    }),
    z.strictObject({
      type: z.literal('recaptcha_enterprise'),
      sitekey: Sitekey.optional(),
      action: Action.optional(),
      min_score: MinScore.optional(),
      invisible: Invisible.optional(),
    }),
    z.strictObject({
      type: z.literal('turnstile'),
      sitekey: Sitekey.optional(),
      action: Action.optional(),
    }),
    z.strictObject({
      type: z.literal('image'),
      body: z
        .base64({
          error: (i) => (i.input === undefined ? 'is required for type image' : 'must be base64'),
        })
        .min(1, { error: 'must not be empty' })
        .max(MAX_IMAGE_BODY_LENGTH, { error: `must be at most ${MAX_IMAGE_BODY_LENGTH} characters` }),
    }),
  ],
  {
    error: (i) =>
      i.input === undefined || i.input === null || typeof i.input !== 'object'
        ? 'must be an object with a "type"'
        : (i.input as { type?: unknown }).type === undefined
          ? `is required (${TYPE_LIST})`
          : `unknown type ${JSON.stringify((i.input as { type?: unknown }).type)} (expected ${TYPE_LIST})`,
  },
);

export const JobMessageSchema = z
  .strictObject({
    record_key: RecordKey,
    batch_id: BatchId.optional(),
    sitekey: Sitekey.optional().meta({
      description: 'The widget sitekey. Required unless captcha.sitekey is given or captcha.type is image.',
    }),
    pageurl: HttpUrl.meta({
      description: 'The page that shows the CAPTCHA; loaded first, in the same session.',
    }),
    submit_url: HttpUrl.meta({
      description: 'Where the form is POSTed (application/x-www-form-urlencoded).',
    }),
    captcha: CaptchaSpec.optional().meta({ description: 'Omitted = reCAPTCHA v2 (the flat form).' }),
    form: z
      .record(
        FieldName,
        z.string({ error: 'must be a string' }).max(MAX_FORM_VALUE_LENGTH, {
          error: `must be at most ${MAX_FORM_VALUE_LENGTH} characters`,
        }),
        {
          error: (i) =>
            i.code === 'invalid_key'
              ? 'field name must be letters, digits and "_-[].:" only (at most 100)'
              : 'must be an object of string fields',
        },
      )
      .refine((form) => Object.keys(form).length <= MAX_FORM_FIELDS, {
        error: `must have at most ${MAX_FORM_FIELDS} fields`,
      })
      .optional()
      .meta({ description: 'Extra form fields posted with the token.' }),
    token_field: FieldName.min(1, { error: 'must not be empty' }).optional().meta({
      description:
        'Form field for the token; default g-recaptcha-response (reCAPTCHA) or cf-turnstile-response (Turnstile). Required for image.',
    }),
    expect: FormExpectationSchema.optional(),
  })
  .superRefine((job, ctx) => {
    const type = job.captcha?.type ?? 'recaptcha_v2';
    if (type === 'image') {
      if (job.token_field === undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['token_field'],
          message: 'is required for captcha type image',
        });
      }
    } else {
      const inner = job.captcha && 'sitekey' in job.captcha ? job.captcha.sitekey : undefined;
      if (job.sitekey === undefined && inner === undefined) {
        ctx.addIssue({ code: 'custom', path: ['sitekey'], message: `is required for ${type}` });
      } else if (job.sitekey !== undefined && inner !== undefined && job.sitekey !== inner) {
        ctx.addIssue({ code: 'custom', path: ['captcha', 'sitekey'], message: 'differs from sitekey' });
      }
    }
    const field = tokenFieldOf(job);
    if (job.form && Object.hasOwn(job.form, field)) {
      ctx.addIssue({ code: 'custom', path: ['form', field], message: 'collides with the token field' });
    }
  })
  .meta({
    title: 'threadgate job message',
    description:
      'One record to solve and submit. The flat form {record_key, sitekey, pageurl, submit_url} means reCAPTCHA v2.',
  });

export type Job = z.output<typeof JobMessageSchema>;

export type JobValidation = { ok: true; job: Job } | { ok: false; reason: string; recordKey?: string };

/** The captcha type of a job; the flat form is reCAPTCHA v2. */
export function captchaTypeOf(job: Pick<Job, 'captcha'>): CaptchaType {
  return job.captcha?.type ?? 'recaptcha_v2';
}

/** The form field the token is posted in. */
export function tokenFieldOf(job: Pick<Job, 'captcha' | 'token_field'>): string {
  if (job.token_field) return job.token_field;
  return captchaTypeOf(job) === 'turnstile' ? 'cf-turnstile-response' : 'g-recaptcha-response';
}

/** The CaptchaAI task for a (valid) job. */
export function captchaTaskOf(job: Job): CaptchaTask {
  const c = job.captcha;
  if (c?.type === 'image') return { type: 'image', body: c.body };
  const sitekey = (c && 'sitekey' in c ? c.sitekey : undefined) ?? job.sitekey ?? '';
  const pageurl = job.pageurl;
  if (!c || c.type === 'recaptcha_v2') {
    return { type: 'recaptcha_v2', sitekey, pageurl, ...(c?.invisible ? { invisible: true } : {}) };
  }
  if (c.type === 'recaptcha_v3') {
    return { type: 'recaptcha_v3', sitekey, pageurl, action: c.action, minScore: c.min_score };
  }
  if (c.type === 'recaptcha_enterprise') {
    return {
      type: 'recaptcha_enterprise',
      sitekey,
      pageurl,
      action: c.action,
      minScore: c.min_score,
      invisible: c.invisible,
    };
  }
  return { type: 'turnstile', sitekey, pageurl, action: c.action };
}

function formatPath(path: readonly PropertyKey[]): string {
  return path.map((p) => String(p)).join('.');
}

/** The field names a job message may carry, at the top level and inside `captcha` and `expect`. */
const KNOWN_FIELDS = {
  top: Object.keys(JobMessageSchema.shape),
  captcha: [...new Set(CaptchaSpec.options.flatMap((option) => Object.keys(option.shape)))],
  expect: Object.keys(FormExpectationSchema.shape),
};

/** Case, `_` and `-` do not count: `submitUrl`, `Submit-URL` and `submit_url` are one name. */
const normalized = (name: string) => name.toLowerCase().replace(/[-_]/g, '');

/**
 * The known field an unknown one was most likely meant to be: the same name up to case and
 * separators (`submitUrl` → `submit_url`), else one within two edits (`sitkey` → `sitekey`).
 */
export function likelyField(unknown: string, known: readonly string[]): string | undefined {
  let best: { name: string; d: number } | undefined;
  for (const name of known) {
    if (name === unknown) continue;
    const d = distance(normalized(unknown), normalized(name));
    if (d <= Math.min(2, Math.floor(name.length / 3)) && (best === undefined || d < best.d))
      best = { name, d };
  }
  return best?.name;
}

/** One issue as `<field>: <what is wrong>`, naming the field. */
function formatIssue(issue: z.core.$ZodIssue): string {
  const path = formatPath(issue.path);
  if (issue.code === 'unrecognized_keys') {
    const where = path ? `${path}.` : '';
    const key = issue.keys[0] ?? '';
    const known = path === 'captcha' || path === 'expect' ? KNOWN_FIELDS[path] : KNOWN_FIELDS.top;
    const meant = likelyField(key, known);
    return `${where}${key}: unknown field${meant ? ` (did you mean ${meant}?)` : ''}`;
  }
  return path ? `${path}: ${issue.message}` : issue.message;
}

/**
 * Validates a raw SQS message body. Pure: no DNS, no allowlist. On failure the reason names
 * the field, and `recordKey` is set when the message carried a usable one (so the worker can
 * write a `rejected` outcome; otherwise the message goes to the DLQ).
 */
export function validateJobMessage(raw: string): JobValidation {
  if (Buffer.byteLength(raw, 'utf8') > MAX_MESSAGE_BYTES) {
    return { ok: false, reason: `message: larger than ${MAX_MESSAGE_BYTES} bytes` };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return { ok: false, reason: 'message: not valid JSON' };
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    return { ok: false, reason: 'message: must be a JSON object' };
  }
  const result = JobMessageSchema.safeParse(parsed);
  if (result.success) return { ok: true, job: result.data };
  // An unknown field is usually the cause of the other issues (a typo'd `submitUrl` is also a
  // missing `submit_url`), so it is the one reported.
  const issues = result.error.issues;
  const first = issues.find((i) => i.code === 'unrecognized_keys') ?? issues[0];
  const reason = first ? formatIssue(first) : 'message: invalid';
  const key = RecordKey.safeParse((parsed as { record_key?: unknown }).record_key);
  return key.success ? { ok: false, reason, recordKey: key.data } : { ok: false, reason };
}

/**
 * The usable batch_id of a raw message body, valid or not (a `rejected` row keeps its batch so
 * the batch's waiters see it); undefined when there is none or it breaks the rules.
 */
export function batchIdOf(raw: string): string | undefined {
  try {
    const parsed = JSON.parse(raw) as { batch_id?: unknown } | null;
    const batch = BatchId.safeParse(parsed?.batch_id);
    return batch.success ? batch.data : undefined;
  } catch {
    return undefined;
  }
}

/** The JSON Schema published as schema/job.schema.json. */
export function jobJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(JobMessageSchema, { target: 'draft-2020-12', unrepresentable: 'any' });
}
