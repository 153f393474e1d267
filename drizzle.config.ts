import { defineConfig } from 'drizzle-kit';

// Used only by `npm run db:generate` (drizzle-kit) to turn broker/db/schema.ts into SQL in migrations/.
export default defineConfig({
  dialect: 'postgresql',
  schema: './broker/db/schema.ts',
  out: './migrations',
});
