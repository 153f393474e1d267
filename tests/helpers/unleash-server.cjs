// Runs a real unleash-server (the devDependency, 8.2.0) for tests: its own database, loopback only,
// authentication off. Arguments: PORT DATABASE_NAME.
const unleash = require('unleash-server');

const [port, database] = process.argv.slice(2);
unleash
  .start({
    db: { host: '127.0.0.1', port: 5432, user: 'postgres', password: '', database, ssl: false },
    server: { port: Number(port), host: '127.0.0.1' },
    authentication: { type: 'none' },
    logLevel: 'error',
  })
  .then(() => console.log('unleash ready'))
  .catch((error) => {
    console.error(error);
    process.exit(1);
  });
process.on('SIGTERM', () => process.exit(0));
