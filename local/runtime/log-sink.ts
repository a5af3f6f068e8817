import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { dirname } from 'node:path';

/** Writes lines to a file, replacing secrets first. */
export class LogSink {
  private readonly stream: WriteStream;
  constructor(
    file: string,
    private readonly redact: string[],
  ) {
    mkdirSync(dirname(file), { recursive: true });
    this.stream = createWriteStream(file, { flags: 'a' });
  }
  line(text: string): void {
    let out = text;
    for (const secret of this.redact) if (secret) out = out.split(secret).join('***');
    this.stream.write(`${new Date().toISOString()} ${out}\n`);
  }
  close(): Promise<void> {
    return new Promise((resolve) => this.stream.end(resolve));
  }
}
