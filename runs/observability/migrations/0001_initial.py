from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="RunTrace",
            fields=[
                ("run_id", models.CharField(max_length=32, primary_key=True, serialize=False)),
                ("traceparent", models.CharField(max_length=55)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
