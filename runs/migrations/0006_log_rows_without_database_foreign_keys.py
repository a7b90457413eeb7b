import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """See runs/models.py: the log rows of a run keep their relation to it but not a
    database foreign key, whose check cost a tenth of each effect's commit."""

    dependencies = [
        ('runs', '0005_checkpoint_base'),
    ]

    operations = [
        migrations.AlterField(
            model_name='checkpoint',
            name='run',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='runs.run'),
        ),
        migrations.AlterField(
            model_name='effect',
            name='run',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='effects', to='runs.run'),
        ),
        migrations.AlterField(
            model_name='runevent',
            name='run',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='runs.run'),
        ),
    ]
