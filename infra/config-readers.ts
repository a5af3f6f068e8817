import { parsePerType } from '../functions/captchaai/timings.js';
import { CAPTCHA_TYPES, type CaptchaType } from '../functions/captchaai/types.js';
import { ConfigError } from '../functions/common/errors.js';

/**
 * Typed reads of one deploy-time setting from props or CDK context (where every value may be a
 * string): each names the setting in its ConfigError. Used by ./config.ts.
 */
type Settings = { readonly [name: string]: unknown };

function present(value: unknown): boolean {
  return value !== undefined && value !== null && !(typeof value === 'string' && value.trim() === '');
}

export function readString(input: Settings, name: string, fallback: string): string {
  return readOptionalString(input, name) ?? fallback;
}

export function readOptionalString(input: Settings, name: string): string | undefined {
  const value = input[name];
  if (!present(value)) return undefined;
  if (typeof value !== 'string')
    throw new ConfigError(name, `must be a string, got ${JSON.stringify(value)}`);
  return value.trim();
}

export function readNumber(
  input: Settings,
  name: string,
  fallback: number,
  limits: { min?: number; max?: number },
): number {
  const raw = input[name];
  if (!present(raw)) return fallback;
  const value = typeof raw === 'number' ? raw : typeof raw === 'string' ? Number(raw.trim()) : Number.NaN;
  if (!Number.isFinite(value)) throw new ConfigError(name, `must be a number, got ${JSON.stringify(raw)}`);
  if (limits.min !== undefined && value < limits.min) {
    throw new ConfigError(name, `must be >= ${limits.min}, got ${value}`);
  }
  if (limits.max !== undefined && value > limits.max) {
    throw new ConfigError(name, `must be <= ${limits.max}, got ${value}`);
  }
  return value;
}

export function readInteger(
  input: Settings,
  name: string,
  fallback: number,
  limits: { min?: number; max?: number },
): number {
  const value = readNumber(input, name, fallback, limits);
  if (!Number.isInteger(value)) throw new ConfigError(name, `must be a whole number, got ${value}`);
  return value;
}

/** true/false, as a boolean (props, cdk.json) or a string (`-c outcomeStream=false`). */
export function readBoolean(input: Settings, name: string, fallback: boolean): boolean {
  const raw = input[name];
  if (!present(raw)) return fallback;
  if (typeof raw === 'boolean') return raw;
  const text = typeof raw === 'string' ? raw.trim().toLowerCase() : undefined;
  if (text === 'true') return true;
  if (text === 'false') return false;
  throw new ConfigError(name, `must be true or false, got ${JSON.stringify(raw)}`);
}

/** A number for every CAPTCHA type, or a JSON object (or object string) of numbers per type. */
export function readPerType(
  input: Settings,
  name: string,
  fallback: Record<CaptchaType, number>,
  limits: { min: number; max: number },
): Record<CaptchaType, number> {
  const raw = input[name];
  if (!present(raw)) return { ...fallback };
  const text =
    typeof raw === 'string' ? raw.trim() : typeof raw === 'object' ? JSON.stringify(raw) : String(raw);
  const out = { ...fallback, ...parsePerType(name, text) };
  for (const type of CAPTCHA_TYPES) {
    const v = out[type];
    if (!Number.isInteger(v) || v < limits.min || v > limits.max) {
      throw new ConfigError(
        name,
        `${type} must be a whole number of ms within ${limits.min}..${limits.max}, got ${v}`,
      );
    }
  }
  return out;
}

export function readList(input: Settings, name: string): string[] {
  const raw = input[name];
  if (!present(raw)) return [];
  const items = Array.isArray(raw) ? raw : typeof raw === 'string' ? raw.split(',') : undefined;
  if (!items || items.some((item) => typeof item !== 'string')) {
    throw new ConfigError(
      name,
      `must be a comma-separated string or a list of strings, got ${JSON.stringify(raw)}`,
    );
  }
  return (items as string[]).map((item) => item.trim()).filter((item) => item !== '');
}
