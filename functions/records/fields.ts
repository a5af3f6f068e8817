/**
 * The fields of an outcome row that leave the table, in export order: the outcome stream's
 * messages carry exactly these, and the CLI exports these plus the lease. Never a token or a key.
 */
export const OUTCOME_FIELDS = [
  'record_key',
  'batch_id',
  'status',
  'reason',
  'target_status',
  'attempts',
  'captcha_type',
  'solve_ms',
  'created_at',
  'updated_at',
  /** The `expect` check that failed a record FORM_REJECTED / FORM_UNCONFIRMED, e.g. `body_excludes[0]`; never page text. */
  'expect_rule',
] as const;

/**
 * Statuses after which a record is done unless an operator redrives it. `cancelled`: its batch was
 * cancelled (`threadgate cancel`) before the record was posted.
 */
export const FINAL_STATUSES = ['submitted', 'failed', 'rejected', 'cancelled'] as const;

/**
 * Statuses with which a record's current attempt has ended: the final ones and `stopped` (its
 * message waits in the DLQ with the reason). These are published on the outcome stream.
 */
export const ENDED_STATUSES = [...FINAL_STATUSES, 'stopped'] as const;

/** Every status an outcome row can have, in the order tools show them. */
export const OUTCOME_STATUSES = ['in_progress', ...ENDED_STATUSES] as const;
