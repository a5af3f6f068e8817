import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { dirname } from 'node:path';
import {
  GetSecretValueCommand,
  paginateListSecretVersionIds,
  type SecretsManagerClient,
} from '@aws-sdk/client-secrets-manager';

/**
 * The secrets one runtime's log files replace with `***`, as a second line of defence (the
 * functions themselves never log the key). The set only grows: the strings it was given, and
 * every value of every secret the functions' environments name (`…_SECRET_NAME`, e.g.
 * CAPTCHAAI_SECRET_NAME), read by `learnSecrets` on each full refresh of the runtime, so that a
 * key stored by `threadgate secret set` after a rotation is redacted too, and so is the old one.
 * A line logged between the rotation and the next full refresh (seconds) is not covered: this
 * is the second line of defence, the functions never log the key.
 */
export class Redactions {
  private readonly secrets = new Set<string>();
  /** Secret version ids already read, per secret name: each version is fetched once. */
  private readonly versionsRead = new Map<string, Set<string>>();
  /** Longest first, so a secret that contains another is replaced whole. */
  private ordered: string[] = [];

  constructor(initial: Iterable<string> = []) {
    for (const secret of initial) this.add(secret);
  }

  add(secret: string | undefined): void {
    if (!secret || this.secrets.has(secret)) return;
    this.secrets.add(secret);
    this.ordered = [...this.secrets].sort((a, b) => b.length - a.length);
  }

  knows(secret: string): boolean {
    return this.secrets.has(secret);
  }

  apply(text: string): string {
    let out = text;
    for (const secret of this.ordered) if (out.includes(secret)) out = out.split(secret).join('***');
    return out;
  }

  /**
   * Reads every version of each named secret not read before (one ListSecretVersionIds per
   * secret and refresh, a GetSecretValue per new version). A secret that cannot be read (not
   * created yet, no such name) is skipped: there is nothing of it to redact.
   */
  async learnSecrets(client: SecretsManagerClient, secretNames: Iterable<string>): Promise<void> {
    for (const name of new Set(secretNames)) {
      const read = this.versionsRead.get(name) ?? new Set<string>();
      this.versionsRead.set(name, read);
      try {
        for await (const page of paginateListSecretVersionIds(
          { client },
          { SecretId: name, IncludeDeprecated: true },
        )) {
          for (const version of page.Versions ?? []) {
            const id = version.VersionId;
            if (!id || read.has(id)) continue;
            const out = await client.send(new GetSecretValueCommand({ SecretId: name, VersionId: id }));
            for (const value of secretValues(out.SecretString)) this.add(value);
            read.add(id);
          }
        }
      } catch {
        // Unreadable now; tried again on the next refresh.
      }
    }
  }
}

/** Shorter learned values are not redacted: replacing them would mangle unrelated text. */
const MIN_LEARNED_LENGTH = 8;

/**
 * What of a secret's string could be a key in a log line: the string, trimmed, and (a JSON
 * secret such as `{"apiKey": "…"}`, which the functions also accept) each string inside it.
 */
export function secretValues(secretString: string | undefined): string[] {
  const raw = secretString?.trim() ?? '';
  const values = [raw];
  if (raw.startsWith('{')) {
    try {
      const walk = (v: unknown): void => {
        if (typeof v === 'string') values.push(v.trim());
        else if (v && typeof v === 'object') for (const x of Object.values(v)) walk(x);
      };
      walk(JSON.parse(raw));
    } catch {
      // Not JSON after all: the whole string is what there is.
    }
  }
  return values.filter((v) => v.length >= MIN_LEARNED_LENGTH);
}

/** Environment variables that name a Secrets Manager secret whose value must never reach a log. */
export function secretNamesIn(env: Record<string, string>): string[] {
  return Object.entries(env)
    .filter(([name, value]) => name.endsWith('_SECRET_NAME') && value !== '')
    .map(([, value]) => value);
}

/** Writes lines to a file, replacing secrets first. */
export class LogSink {
  private readonly stream: WriteStream;
  constructor(
    file: string,
    private readonly redactions: Redactions,
  ) {
    mkdirSync(dirname(file), { recursive: true });
    this.stream = createWriteStream(file, { flags: 'a' });
  }
  line(text: string): void {
    this.stream.write(`${new Date().toISOString()} ${this.redactions.apply(text)}\n`);
  }
  close(): Promise<void> {
    return new Promise((resolve) => this.stream.end(resolve));
  }
}
