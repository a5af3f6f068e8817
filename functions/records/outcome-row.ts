/**
 * The outcome row and the results of the store's writes (./store.ts, where every write is made;
 * docs/design.md "Outcome row"). Never a token or a key.
 */
export type OutcomeStatus = 'in_progress' | 'submitted' | 'failed' | 'rejected' | 'cancelled' | 'stopped';

export interface OutcomeRow {
  record_key: string;
  batch_id?: string;
  /** The batch index's partition key, `<batch_id>#<n>` (./batch-index.ts); set with batch_id. */
  batch_shard?: string;
  status: OutcomeStatus;
  reason?: string;
  target_status?: number;
  /** The `expect` check that decided a FORM_REJECTED / FORM_UNCONFIRMED outcome, e.g. `body_excludes[0]`. */
  expect_rule?: string;
  /** in.php submits made for the record, over all its claims. */
  attempts?: number;
  captcha_type?: string;
  solve_ms?: number;
  created_at?: string;
  updated_at?: string;
  /** When the row was first written or last ended (ISO 8601): the batch index's sort key (./batch-index.ts). */
  status_at?: string;
  lease_owner?: string;
  /** Epoch ms. */
  lease_expires_at?: number;
  /** Phase marker: the CaptchaAI task of the current claim, written once in.php answered. */
  task_id?: string;
  /** Phase marker: when in.php answered with task_id (epoch ms); its deadline runs from here. */
  task_submitted_at?: number;
  /** Phase marker: written just before the form POST (epoch ms); the form may have taken the token since. */
  posting_at?: number;
  /**
   * Epoch ms: a claim was released with the record's one fresh resubmission after UNSOLVABLE
   * already due (its first task answered UNSOLVABLE). A later claim submits that one task and no
   * other, whatever its receive: the release clears the task markers, not the budget.
   */
  resubmission_due_at?: number;
}

export type ClaimResult =
  /** `previous`: the row as it was before this claim took it (an expired lease, `stopped`), with its phase markers. */
  | { claimed: true; leaseExpiresAt: number; previous?: OutcomeRow }
  /** `finished`: submitted / failed / rejected / cancelled. `leased`: in_progress with a live lease. */
  | { claimed: false; why: 'finished' | 'leased'; row: OutcomeRow | undefined };

export interface FinalOutcome {
  status: 'submitted' | 'failed' | 'cancelled' | 'stopped';
  reason: string;
  targetStatus?: number;
  /** The `expect` check that decided (FORM_REJECTED / FORM_UNCONFIRMED); never text of the page. */
  expectRule?: string;
  /** in.php submits made by this claim (added to the row's attempts). */
  attempts?: number;
  solveMs?: number;
}

export type WriteResult = { written: true } | { written: false; row: OutcomeRow | undefined };
