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
] as const;
