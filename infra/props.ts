import type { CaptchaType } from '../functions/captchaai/types.js';
import type { FormExpectation } from '../functions/records/form-verdict.js';
import type { TableEncryptionChoice, ThreadgateConfig } from './config.js';

/** A wait in ms for every CAPTCHA type, or per type (the types left out keep their default). */
export type PerCaptchaTypeMs = number | Partial<Record<CaptchaType, number>>;

/**
 * The settings of docs/configuration.md as typed props. Every one is optional, validated at
 * synth by the same rules as CDK context (infra/config.ts), with the same defaults.
 */
export interface ThreadgateProps {
  /**
   * Prefix of the function names (`<name>-worker`, …), the alarms and the dashboard, and the
   * metrics' `service` dimension.
   * Valid range: a letter, then letters, digits and hyphens, at most 50 characters.
   * @default the enclosing stack's name
   */
  readonly name?: string;
  /**
   * Target hosts the worker may contact: exact host or `*.suffix` (an optional `:port` is ignored).
   * The worker refuses to start while it is empty.
   * @default []
   */
  readonly allowedHosts?: readonly string[];
  /**
   * DNS servers (`ip` or `ip:port`) that resolve target hosts instead of Lambda's resolver, reachable from the internet (the functions run outside any VPC).
   * @default [] (the system resolver)
   */
  readonly dnsServers?: readonly string[];
  /**
   * Plan threads kept free for anything else using the same CaptchaAI key (cap = threads − reserve).
   * Valid range: 0–10000.
   * @default 1
   */
  readonly reserve?: number;
  /**
   * Cap deployed before the cap adjuster's first run (reserved concurrency and mapping maximum).
   * Valid range: 1–1000 × lanes, and within minCap..maxCap.
   * @default 4
   */
  readonly initialCap?: number;
  /**
   * The adjuster never sets a lower cap (a pause is not a cap of 0).
   * Valid range: 1–1000, and at most maxCap.
   * @default 1
   */
  readonly minCap?: number;
  /**
   * The adjuster never sets a higher cap; a plan above it leaves threads idle (logged, metric
   * `CapClampedByMax`, shown by `threadgate status`): set it only to clamp on purpose.
   * Valid range: 1–1000 × lanes (r ≤ 1000 invocations, the mapping's limit, of `lanes` lanes).
   * @default 1000 × lanes
   */
  readonly maxCap?: number;
  /**
   * CaptchaAI base URL.
   * Valid range: an absolute http(s) URL.
   * @default 'https://ocr.captchaai.com'
   */
  readonly captchaaiUrl?: string;
  /**
   * Name (not ARN) of the Secrets Manager secret holding the API key, created outside the stack.
   * Valid range: 1–512 characters of letters, digits and `/_+=.@-`.
   * @default 'threadgate/captchaai-api-key'
   */
  readonly secretName?: string;
  /**
   * Multiplies every CaptchaAI wait, deadline and HTTP timeout of the worker's client.
   * Valid range: 0.0001–10.
   * @default 1
   */
  readonly timeScale?: number;
  /**
   * Timeout of each HTTP call to the target form, in ms (real time).
   * Valid range: 100–120000.
   * @default 15000
   */
  readonly targetTimeoutMs?: number;
  /**
   * How long a record that hit the CaptchaAI deadline keeps its slot, in ms (real time).
   * Valid range: 0–600000.
   * @default 60000
   */
  readonly cooldownMs?: number;
  /**
   * Wait between two res.php polls of one task, in ms (× timeScale): one number for every type, or per type.
   * Valid range: 500–60000 for each type.
   * @default 3000 for reCAPTCHA, 2000 for Turnstile and image
   */
  readonly pollIntervalMs?: PerCaptchaTypeMs;
  /**
   * Wait from the submit to the first res.php poll, in ms (× timeScale): one number for every type, or per type.
   * Valid range: 0–120000 for each type.
   * @default 15000 for reCAPTCHA, 5000 for Turnstile and image
   */
  readonly firstPollMs?: PerCaptchaTypeMs;
  /**
   * Most res.php polls of one task on the static schedule, the last kept for the deadline.
   * Valid range: 2–19.
   * @default 17
   */
  readonly pollBudget?: number;
  /**
   * `learned` (polls placed from each environment's own solve times, per type) or `static`
   * (firstPollMs, pollIntervalMs and pollBudget, pinned).
   * @default 'learned'
   */
  readonly pollSchedule?: 'learned' | 'static';
  /**
   * Mean res.php calls per solve the learned schedule may spend.
   * Valid range: 1–19.
   * @default 12
   */
  readonly pollMeanBudget?: number;
  /**
   * How long after its start a worker invocation keeps taking the next message itself, one record
   * at a time, the next task submitted as soon as the previous answer is in hand (0: one record per
   * invocation). Added to the default timeout within Lambda's 900 s.
   * Valid range: 0–900.
   * @default 120 × timeScale
   */
  readonly chainSeconds?: number;
  /**
   * The most lanes (one-task loops) per worker invocation: r invocations of L lanes carry the cap
   * (r × L ≤ cap), the duration bill and quota fall by about L (docs/design.md "Lanes").
   * Valid range: 1–64.
   * @default 1
   */
  readonly lanes?: number;
  /**
   * Worker timeout in seconds; a value below the worst-case attempt is refused.
   * Valid range: 1–900, and at least the worst case of one record.
   * @default the worst case of one record (773 s) plus chainSeconds (893 s at the defaults), at least 10, at most 900
   */
  readonly workerTimeoutSeconds?: number;
  /**
   * Worker memory in MB; the default rests on peak RSS and CPU measured as Lambda runs it with 1, 8, 16, 32 and 64 lanes.
   * Valid range: 128–10240.
   * @default 168 with one lane; 192 up to 8 lanes, 256 up to 32, 384 above
   */
  readonly workerMemoryMb?: number;
  /**
   * Receives before SQS moves a message to the DLQ.
   * Valid range: 5–1000.
   * @default 5
   */
  readonly maxReceiveCount?: number;
  /**
   * Receives after which the worker records a transient failure instead of retrying.
   * Valid range: 1–1000, and below maxReceiveCount.
   * @default 3
   */
  readonly transientReceiveLimit?: number;
  /**
   * How long a record's in-progress claim lasts, in seconds.
   * Valid range: 1–43200, and above workerTimeoutSeconds.
   * @default workerTimeoutSeconds + 10 % (at least + 5)
   */
  readonly leaseSeconds?: number;
  /**
   * Visibility timeout of the jobs queue in seconds: how soon the message of an invocation that died comes back.
   * Valid range: 1–43200, and at least workerTimeoutSeconds.
   * @default 6 × the worker timeout
   */
  readonly visibilityTimeoutSeconds?: number;
  /**
   * Threshold of the oldest-job alarm, in seconds.
   * Valid range: 60–1209600.
   * @default 3600
   */
  readonly oldestMessageAlarmSeconds?: number;
  /**
   * Retention of the functions' log groups, in days.
   * Valid range: a CloudWatch Logs retention value (1, 3, 5, 7, 14, 30, 60, 90, … 3653).
   * @default 30
   */
  readonly logRetentionDays?: number;
  /**
   * SNS topic ARN every alarm notifies.
   * @default none
   */
  readonly alarmTopicArn?: string;
  /**
   * Publish every final outcome to an outcomes queue (table stream → publisher Lambda → SQS).
   * @default true
   */
  readonly outcomeStream?: boolean;
  /**
   * Log level of every function (Powertools' POWERTOOLS_LOG_LEVEL). Below INFO the worker's
   * per-record line is gone.
   * Valid values: 'DEBUG', 'INFO', 'WARN', 'ERROR'.
   * @default 'INFO'
   */
  readonly logLevel?: 'DEBUG' | 'INFO' | 'WARN' | 'ERROR';
  /**
   * Days an outcome row is kept after its last write (DynamoDB TTL); 0 keeps rows for ever. A
   * record_key sent again after its row expired is solved again.
   * Valid range: 0–36500.
   * @default 0
   */
  readonly outcomeRetentionDays?: number;
  /**
   * The tables' encryption at rest: the AWS managed key `aws/dynamodb` (KMS requests billed, the
   * key visible in KMS and CloudTrail) or a key DynamoDB owns (no KMS charge).
   * Valid values: 'aws-managed', 'aws-owned'.
   * @default 'aws-managed'
   */
  readonly tableEncryption?: TableEncryptionChoice;
  /**
   * Seconds the outcome stream's mapping gathers records before it invokes the publisher: fewer
   * publisher invocations, outcomes later by up to this.
   * Valid range: 0–300.
   * @default 0
   */
  readonly outcomeStreamBatchingSeconds?: number;
  /**
   * The default `expect` block for jobs without one: which answers of the form count as accepted
   * (`status`), and text that must (`body_includes`) or must not (`body_excludes`) be in the
   * answer, or where its redirect must go (`location`). A job's own block replaces it whole.
   * Validated at synth by the job schema's rules.
   * @default none (2xx/3xx = submitted)
   */
  readonly expect?: FormExpectation;
  /**
   * Add the stack outputs the `threadgate` CLI reads (QueueUrl, TableName, …) under their plain
   * names, so `threadgate status --stack <stack>` finds this deployment. One Threadgate per
   * stack can have them.
   * @default true
   */
  readonly stackOutputs?: boolean;
}

// Every deploy-time setting is a prop (the stack name is `name`): adding a setting to
// ThreadgateConfig without a prop here fails `tsc`.
type MissingProps = Exclude<keyof ThreadgateConfig, keyof ThreadgateProps | 'stackName'>;
const everySettingIsAProp: [MissingProps] extends [never] ? true : MissingProps = true;
void everySettingIsAProp;
