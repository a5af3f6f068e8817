import { ConfigError } from '../functions/common/errors.js';
import { DEFAULTS } from '../functions/common/settings.js';
import { readBoolean, readInteger, readOptionalString, readString } from './config-readers.js';

/**
 * The settings of how the stack is run rather than what it does: its alarms, logs, retention,
 * encryption and the outcome stream (./config.ts resolves them with the rest).
 */

/** Raw inputs, as ./config.ts takes them (no import of it: it imports this file). */
type Settings = { readonly [name: string]: unknown };

export const LOG_LEVELS = ['DEBUG', 'INFO', 'WARN', 'ERROR'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const TABLE_ENCRYPTIONS = ['aws-managed', 'aws-owned'] as const;
export type TableEncryptionChoice = (typeof TABLE_ENCRYPTIONS)[number];

const LOG_RETENTION_DAYS = [
  1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
];

/** Alarms, log retention and the outcome stream. */
export function readMonitoring(input: Settings): {
  oldestMessageAlarmSeconds: number;
  logRetentionDays: number;
  alarmTopicArn: string | undefined;
  outcomeStream: boolean;
} {
  const oldestMessageAlarmSeconds = readInteger(
    input,
    'oldestMessageAlarmSeconds',
    DEFAULTS.oldestMessageAlarmSeconds,
    { min: 60, max: 1_209_600 },
  );
  const logRetentionDays = readInteger(input, 'logRetentionDays', DEFAULTS.logRetentionDays, { min: 1 });
  if (!LOG_RETENTION_DAYS.includes(logRetentionDays)) {
    throw new ConfigError(
      'logRetentionDays',
      `must be one of ${LOG_RETENTION_DAYS.join(', ')}, got ${logRetentionDays}`,
    );
  }
  const topic = readOptionalString(input, 'alarmTopicArn');
  if (topic !== undefined && !/^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$/.test(topic)) {
    throw new ConfigError('alarmTopicArn', `must be an SNS topic ARN, got "${topic}"`);
  }
  return {
    oldestMessageAlarmSeconds,
    logRetentionDays,
    alarmTopicArn: topic,
    outcomeStream: readBoolean(input, 'outcomeStream', DEFAULTS.outcomeStream),
  };
}

/** The settings that move the bill without changing what the pipeline does (docs/configuration.md "Cost"). */
export function readCostSettings(input: Settings): {
  logLevel: LogLevel;
  outcomeRetentionDays: number;
  tableEncryption: TableEncryptionChoice;
  outcomeStreamBatchingSeconds: number;
} {
  const oneOf = <T extends string>(name: string, allowed: readonly T[], fallback: T): T => {
    const value = readString(input, name, fallback);
    const found = allowed.find((a) => a.toLowerCase() === value.toLowerCase());
    if (!found) throw new ConfigError(name, `must be one of ${allowed.join(', ')}, got "${value}"`);
    return found;
  };
  return {
    logLevel: oneOf('logLevel', LOG_LEVELS, DEFAULTS.logLevel),
    outcomeRetentionDays: readInteger(input, 'outcomeRetentionDays', DEFAULTS.outcomeRetentionDays, {
      min: 0,
      max: 36_500,
    }),
    tableEncryption: oneOf('tableEncryption', TABLE_ENCRYPTIONS, DEFAULTS.tableEncryption),
    // The mapping's MaximumBatchingWindowInSeconds allows 0–300.
    outcomeStreamBatchingSeconds: readInteger(
      input,
      'outcomeStreamBatchingSeconds',
      DEFAULTS.outcomeStreamBatchingSeconds,
      { min: 0, max: 300 },
    ),
  };
}
