import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { jobJsonSchema } from './job-schema.js';

/** `npm run schema`: regenerates schema/job.schema.json from the zod source. */
export const JOB_SCHEMA_PATH = fileURLToPath(new URL('../../schema/job.schema.json', import.meta.url));

export function renderJobSchema(): string {
  return `${JSON.stringify(jobJsonSchema(), null, 2)}\n`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  writeFileSync(JOB_SCHEMA_PATH, renderJobSchema());
  process.stdout.write(`wrote ${JOB_SCHEMA_PATH}\n`);
}
