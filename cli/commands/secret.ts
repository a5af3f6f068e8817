import {
  CreateSecretCommand,
  PutSecretValueCommand,
  ResourceExistsException,
} from '@aws-sdk/client-secrets-manager';
import type { Command } from 'commander';
import { DEFAULTS } from '../../functions/common/settings.js';
import { CliError, EXIT } from '../exit-codes.js';
import {
  type AwsContext,
  addStackOptions,
  awsContext,
  explainAwsError,
  findStack,
  type StackOptions,
  stackName,
} from '../stack.js';

interface SecretSetOptions extends StackOptions {
  secretName?: string;
  json?: boolean;
}

/**
 * `threadgate secret set`: store the CaptchaAI API key in Secrets Manager. The key comes from
 * standard input only: an argument would land in shell history and the process list. It is
 * never printed, not even in part.
 */
export function registerSecret(program: Command): void {
  const secret = program
    .command('secret')
    .description('Manage the CaptchaAI API-key secret')
    .addHelpText('after', '\nExample:\n  $ threadgate secret set < captchaai-key.txt\n');
  addStackOptions(
    secret
      .command('set')
      .description(
        'Create or rotate the API-key secret; reads the key from standard input, never from an argument',
      ),
  )
    .option(
      '--secret-name <name>',
      `the secret to write (default: the stack's SecretName output, else ${DEFAULTS.secretName})`,
    )
    .option('--json', 'print the result as JSON')
    .allowExcessArguments(true)
    .addHelpText(
      'after',
      '\nExamples:\n  $ threadgate secret set < captchaai-key.txt\n' +
        '  $ pass show captchaai | threadgate secret set\n' +
        '  $ threadgate secret set            # on a terminal: prompts, input hidden\n',
    )
    .action(async (options: SecretSetOptions, command: Command) => {
      if (command.args.length > 0) {
        // Do not repeat the argument: it may be the key.
        throw new CliError(
          'the API key is read from standard input only, never from an argument (it would stay in shell history and the process list). ' +
            'Run: threadgate secret set < keyfile   (or pipe it in, or run without arguments on a terminal to be prompted)',
          EXIT.usage,
        );
      }
      // The key first: on a terminal the prompt (echo off) must come before anything slow,
      // or keys typed ahead would be echoed by the terminal.
      const key = await readKey();
      const aws = await awsContext(options);
      const secretName = options.secretName
        ? { name: options.secretName, note: undefined }
        : await secretNameFromStack(aws, options);
      try {
        const result = await storeKey(aws, secretName.name, key);
        if (options.json) {
          process.stdout.write(`${JSON.stringify({ secretName: secretName.name, ...result }, null, 2)}\n`);
        } else {
          process.stdout.write(
            `${result.action === 'created' ? 'created' : 'rotated'} secret ${secretName.name}${
              result.versionId ? ` (version ${result.versionId})` : ''
            }${secretName.note ? ` — ${secretName.note}` : ''}\n`,
          );
        }
      } catch (err) {
        throw explainAwsError(err, aws);
      }
    });
}

async function secretNameFromStack(
  aws: AwsContext,
  options: StackOptions,
): Promise<{ name: string; note?: string }> {
  const name = stackName(options);
  try {
    const stack = await findStack(aws, name);
    return { name: stack.outputs.SecretName ?? DEFAULTS.secretName };
  } catch (err) {
    // Setting the key before the first deploy is normal: the stack refers to the secret by name.
    if (err instanceof CliError && err.message.startsWith('no stack named')) {
      return {
        name: DEFAULTS.secretName,
        note: `stack "${name}" is not deployed yet; used the default name`,
      };
    }
    throw explainAwsError(err, aws);
  }
}

async function storeKey(
  aws: AwsContext,
  secretName: string,
  key: string,
): Promise<{ action: 'created' | 'rotated'; versionId?: string }> {
  const value = JSON.stringify({ apiKey: key });
  try {
    const out = await aws.clients.secrets.send(
      new CreateSecretCommand({
        Name: secretName,
        SecretString: value,
        Description: 'CaptchaAI API key for threadgate (set with `threadgate secret set`)',
      }),
    );
    return { action: 'created', versionId: out.VersionId };
  } catch (err) {
    if (
      !(err instanceof ResourceExistsException) &&
      (err as { name?: string }).name !== 'ResourceExistsException'
    ) {
      throw err;
    }
  }
  const out = await aws.clients.secrets.send(
    new PutSecretValueCommand({ SecretId: secretName, SecretString: value }),
  );
  return { action: 'rotated', versionId: out.VersionId };
}

/** The key from stdin: piped (first non-empty line) or typed at a hidden prompt. */
async function readKey(): Promise<string> {
  const stdin = process.stdin;
  const raw = stdin.isTTY ? await promptHidden('CaptchaAI API key (input hidden): ') : await readAll(stdin);
  const lines = raw
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== '');
  if (lines.length === 0) {
    throw new CliError(
      'no API key on standard input; run: threadgate secret set < keyfile   (or pipe it in)',
      EXIT.usage,
    );
  }
  if (lines.length > 1) {
    throw new CliError('standard input holds more than one non-empty line; give exactly the key', EXIT.usage);
  }
  const key = lines[0]!;
  if (/\s/.test(key)) throw new CliError('the API key must not contain spaces', EXIT.usage);
  return key;
}

async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  let data = '';
  stream.setEncoding('utf8');
  for await (const chunk of stream) data += chunk as string;
  return data;
}

/** Reads one line from the terminal with echo off. */
function promptHidden(prompt: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const stdin = process.stdin;
    // Echo off before the prompt shows: anything typed after seeing it is never displayed.
    stdin.setRawMode(true);
    process.stderr.write(prompt);
    stdin.setEncoding('utf8');
    stdin.resume();
    let value = '';
    const done = (err?: Error) => {
      stdin.setRawMode(false);
      stdin.pause();
      stdin.off('data', onData);
      process.stderr.write('\n');
      if (err) reject(err);
      else resolve(value);
    };
    const onData = (chunk: string) => {
      for (const ch of chunk) {
        if (ch === '\r' || ch === '\n') return done();
        if (ch === '\u0003') return done(new CliError('cancelled', EXIT.failure));
        if (ch === '\u007f' || ch === '\b') value = value.slice(0, -1);
        else if (ch >= ' ') value += ch;
      }
    };
    stdin.on('data', onData);
  });
}
