// What TypeScript accepts and refuses of typed collections, queries and events: each
// `@ts-expect-error` fails the compile when the line after it compiles.
import { blobValue, createClient, schema, type BlobRef, type Infer, type LocalRecord, type TokenRefusal } from "@syncline/web";

interface Recipe {
  title: string;
  minutes?: number;
  tags: string[];
  author: { name: string; country?: string };
  photo?: { $blob: BlobRef };
}

export async function typedCollections(): Promise<void> {
  const client = await createClient({ gatewayURL: "https://sync.example.com", databaseName: "meals", tokenProvider: async () => "token" });
  const recipes = client.collection<Recipe>("recipes");

  await recipes.upsert("r1", { title: "Soup", tags: [], author: { name: "Ana" } });
  // @ts-expect-error a field Recipe does not have
  await recipes.upsert("r1", { title: "Soup", tags: [], author: { name: "Ana" }, titel: "x" });
  // @ts-expect-error a required field missing
  await recipes.upsert("r1", { tags: [], author: { name: "Ana" } });
  await recipes.patch("r1", { minutes: 20 });
  await recipes.patch("r1", { minutes: null });
  // @ts-expect-error a field that must be there cannot be removed
  await recipes.patch("r1", { title: null });
  await recipes.increment("r1", "minutes", -5);
  // @ts-expect-error only a number field is a counter
  await recipes.increment("r1", "title", 1);
  await recipes.add("r1", "tags", ["quick"]);
  await recipes.remove("r1", "tags", ["slow", "cold"]);
  // @ts-expect-error an element of another type
  await recipes.add("r1", "tags", [3]);
  // @ts-expect-error only an array field is a set
  await recipes.add("r1", "minutes", [1]);

  const quick: LocalRecord<Recipe>[] = await recipes.query({
    where: { minutes: { lt: 30 }, "author.name": { eq: "Ana" }, tags: { contains: "soup" }, id: { in: ["r1", "r2"] } },
    orderBy: ["-minutes", "title", "author.country"],
    limit: 10,
  });
  const title: string = quick[0].data.title;
  const minutes: number | undefined = quick[0].data.minutes;
  // @ts-expect-error an unknown field
  await recipes.query({ where: { minuts: { lt: 30 } } });
  // @ts-expect-error an unknown operator
  await recipes.query({ where: { minutes: { between: [1, 2] } } });
  // @ts-expect-error a value of the wrong type
  await recipes.query({ where: { minutes: { lt: "30" } } });
  // @ts-expect-error contains on a number
  await recipes.query({ where: { minutes: { contains: 3 } } });
  // @ts-expect-error ordering by an unknown field
  await recipes.query({ orderBy: ["-minuts"] });
  await recipes.count({ where: { title: { isNull: false } } });

  const stop = recipes.observe({ where: { title: { eq: "Soup" } } }, (records) => {
    const first: string | undefined = records[0]?.data.author.name;
    void first;
  });
  stop();
  recipes.observeRecord("r1", (record) => {
    const name: string | undefined = record?.data.author.name;
    void name;
  })();

  // The untyped API takes a type too, and interface types work there.
  const rows = await client.query<Recipe>("recipes", { where: { minutes: { gte: 10 } } });
  const firstTitle: string | undefined = rows[0]?.data.title;
  client.observe<Recipe>({ collection: "recipes", orderBy: ["title"] }, (records) => void records[0]?.data.tags);

  client.on("setAside", (detail) => {
    const reason: string = detail.reason;
    void reason;
  });
  client.events.addEventListener("jobDead", (event) => {
    const opIDs: string[] = event.detail.opIDs;
    void opIDs;
  });
  // @ts-expect-error an event that does not exist
  client.on("setaside", () => {});

  const recipeSchema = schema.object({
    title: schema.string(),
    minutes: schema.optional(schema.integer()),
    tags: schema.array(schema.string()),
    level: schema.literal("easy", "hard"),
    photo: schema.optional(schema.file()),
  });
  type Checked = Infer<typeof recipeSchema>;
  const checked = client.collection("recipes", recipeSchema);
  const made: Checked = { title: "x", tags: [], level: "easy" };
  await checked.upsert("r2", made);
  // @ts-expect-error minutes is a number
  await checked.upsert("r2", { title: "x", tags: [], level: "easy", minutes: "5" });
  // @ts-expect-error not one of the levels
  await checked.upsert("r2", { title: "x", tags: [], level: "medium" });
  // A file attached goes into a file field as blobValue makes it, and nothing else does.
  const photo = await client.attach(new Blob(["jpeg"], { type: "image/jpeg" }));
  await checked.upsert("r3", { title: "x", tags: [], level: "easy", photo: blobValue(photo) });
  await recipes.patch("r1", { photo: blobValue(photo) });
  // @ts-expect-error a reference is not the file value
  await checked.upsert("r3", { title: "x", tags: [], level: "easy", photo });
  // auth and sign-out are typed too
  const auth: "unknown" | "accepted" | "refused" = (await client.status()).auth;
  client.on("unauthorized", (detail) => { const reason: TokenRefusal = detail.reason; void reason; });
  const { unsentOps } = await client.signOut({ wipe: true });
  void auth, unsentOps;
  void title, minutes, firstTitle;
}
