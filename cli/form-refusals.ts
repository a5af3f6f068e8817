import { REASON } from '../functions/records/decisions.js';

/**
 * Rows the form itself said no to, by the job's `expect` block (functions/records/form-verdict.ts):
 * `failed` FORM_REJECTED or FORM_UNCONFIRMED, each with the check that decided in `expect_rule`.
 * `threadgate outcomes` and `threadgate wait` count them apart, so an operator sees that the
 * solve and the POST worked and the form refused.
 */
export const FORM_REFUSALS = [REASON.FORM_REJECTED, REASON.FORM_UNCONFIRMED] as const;

/** The reason of a row the form refused, or undefined. */
export function formRefusalOf(row: { status?: unknown; reason?: unknown }): string | undefined {
  return row.status === 'failed' && (FORM_REFUSALS as readonly unknown[]).includes(row.reason)
    ? (row.reason as string)
    : undefined;
}

/** Counts by reason of the rows the form refused (none: {}). */
export function formRefusalCounts(
  rows: Iterable<{ status?: unknown; reason?: unknown }>,
): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const row of rows) {
    const reason = formRefusalOf(row);
    if (reason) counts[reason] = (counts[reason] ?? 0) + 1;
  }
  return counts;
}

/** `FORM_REJECTED 2, FORM_UNCONFIRMED 1`, or '' when the form refused none. */
export function formRefusalText(counts: Record<string, number>): string {
  return FORM_REFUSALS.filter((r) => counts[r])
    .map((r) => `${r} ${counts[r]}`)
    .join(', ');
}
