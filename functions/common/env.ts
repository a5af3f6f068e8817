import { ConfigError } from './errors.js';

/**
 * Small readers for configuration from environment variables. Each one names the variable
 * in its error, so a misconfigured function says exactly what to fix.
 */
export type Env = Record<string, string | undefined>;

export function requireString(env: Env, name: string): string {
  const value = env[name];
  if (value === undefined || value.trim() === '') {
    throw new ConfigError(name, 'is required but not set');
  }
  return value.trim();
}

export function optionalString(env: Env, name: string, fallback: string): string {
  const value = env[name];
  return value === undefined || value.trim() === '' ? fallback : value.trim();
}

export function optionalNumber(
  env: Env,
  name: string,
  fallback: number,
  limits: { min?: number; max?: number; integer?: boolean } = {},
): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value)) throw new ConfigError(name, `must be a number, got "${raw}"`);
  if (limits.integer && !Number.isInteger(value))
    throw new ConfigError(name, `must be an integer, got "${raw}"`);
  if (limits.min !== undefined && value < limits.min)
    throw new ConfigError(name, `must be >= ${limits.min}, got ${value}`);
  if (limits.max !== undefined && value > limits.max)
    throw new ConfigError(name, `must be <= ${limits.max}, got ${value}`);
  return value;
}

export function optionalList(env: Env, name: string): string[] {
  const raw = env[name];
  if (raw === undefined) return [];
  return raw
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');
}
