import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { STOP_CODES } from '../../../../functions/captchaai/answers.js';
import { NO_ACTIVE_PLAN } from '../../../../functions/pipeline/cap.js';
import { REASON } from '../../../../functions/records/decisions.js';
import { PACKAGE_ROOT } from '../../../../infra/package-root.js';
import { malformedJobs } from '../../../fixtures/job-catalog.js';

/**
 * docs/outcomes.md's "Statuses and reasons" table against the code: every reason a row can
 * carry (the worker's own, every TargetError code, every stop code) is in it, and the quoted
 * size of the bad-input catalog is the catalog's.
 */
const DOC = readFileSync(`${PACKAGE_ROOT}docs/outcomes.md`, 'utf8');
const TABLE = DOC.slice(DOC.indexOf('## Statuses and reasons'), DOC.indexOf('## Reading outcomes back'));

function sources(dir: string): string {
  return readdirSync(`${PACKAGE_ROOT}${dir}`, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => readFileSync(`${e.parentPath}/${e.name}`, 'utf8'))
    .join('\n');
}

const CODE = sources('functions');
/** `new TargetError('CODE'` and `new TargetError(\`PAGE_HTTP_${…}\``: the target and allowlist failures. */
const TARGET_CODES = [...CODE.matchAll(/new TargetError\(\s*['`]([A-Z_]+?)(?:\$\{[^}]*\})?['`]/g)].map(
  (m) => (m[0].includes('${') ? `${m[1]}<status>` : m[1]) as string,
);
/**
 * Not row reasons: an aborted invocation leaves the record to its lease (decideOutcome: retry, no
 * row); a final write that never landed and a pause that failed are retries too (the row's
 * reason comes later: OUTCOME_UNKNOWN, or the stop code), and so is a stop another lane records
 * and an in.php that no longer fits late in an invocation with lanes (the claim is released).
 */
const NOT_ROW_REASONS = new Set([
  'TARGET_ABORTED',
  REASON.ABORTED,
  REASON.FINAL_WRITE_FAILED,
  REASON.PAUSE_FAILED,
  REASON.STOPPED_BY_ANOTHER_LANE,
  REASON.INVOCATION_ENDING,
  REASON.LEASED_ELSEWHERE,
  REASON.HELD_BY_ANOTHER_MESSAGE,
  REASON.ALREADY_FINISHED,
]);

describe('docs/outcomes.md reason table', () => {
  it.each(
    [
      ...new Set([
        ...TARGET_CODES,
        ...Object.values(REASON).filter((r) => r !== REASON.INVALID_JOB),
        ...[...CODE.matchAll(/'(SUBMIT_ANSWER_[A-Z]+)'/g)].map((m) => m[1] as string),
        'TARGET_HTTP_<status>',
        'ERROR_CAPTCHA_UNSOLVABLE',
        ...STOP_CODES,
        NO_ACTIVE_PLAN,
      ]),
    ].filter((r) => !NOT_ROW_REASONS.has(r)),
  )('lists %s', (reason) => {
    expect(TABLE).toContain(`\`${reason}\``);
  });

  it('finds the target codes it checks (the pattern still matches the code)', () => {
    expect(TARGET_CODES).toEqual(
      expect.arrayContaining(['PAGE_TOO_LARGE', 'PAGE_HTTP_<status>', 'HOST_NOT_ALLOWED']),
    );
  });

  it('quotes the size of the bad-input catalog', () => {
    const count = malformedJobs('https://forms.example.com', 'sitekey', 'doc').length;
    expect(DOC).toContain(`test/fixtures/job-catalog.ts lists ${count} bad inputs`);
  });
});
